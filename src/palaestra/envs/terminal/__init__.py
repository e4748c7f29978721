"""Shell tasks in a sandbox, Harbor-style task directories (``terminal``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"terminal": "palaestra.envs.terminal.env:Terminal"}
