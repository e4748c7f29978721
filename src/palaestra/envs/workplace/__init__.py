"""Stateful office environment (``workplace``): calendar, email and tickets in per-session SQLite."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"workplace": "palaestra.envs.workplace.env:Workplace"}
