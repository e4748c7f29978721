"""Text-to-SQL on bundled SQLite databases (``sql``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"sql": "palaestra.envs.sql.env:SQLEnv"}
