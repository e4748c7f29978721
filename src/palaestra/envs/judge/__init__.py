"""Free-form answers graded by an LLM judge (``judge``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"judge": "palaestra.envs.judge.env:Judge"}
