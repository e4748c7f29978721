"""Multiple-choice question answering environment (``mcqa``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"mcqa": "palaestra.envs.mcqa.env:MCQA"}
