"""Ready-made integrations with the trainers people use (``palaestra.integrations.trl``: TRL's
``GRPOTrainer``, and so Unsloth). The top layer of the library: an integration may use the public API and
everything below it, and nothing imports an integration. Importing this package imports no trainer."""
