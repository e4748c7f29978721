"""The package version, in ``core`` so that any layer can record it (``run.json``) without importing the
top-level package, which pulls in the public API above every other layer."""

__version__ = "0.1.0"
