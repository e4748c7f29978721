"""Structured outputs validated against a JSON Schema (``json_schema``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"json_schema": "palaestra.envs.json_schema.env:JSONSchema"}
