"""An adapter over the reasoning-gym library (``reasoning_gym``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"reasoning_gym": "palaestra.envs.reasoning_gym.env:ReasoningGym"}
