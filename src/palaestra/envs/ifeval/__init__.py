"""Instruction following with verifiable constraints (``ifeval``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"ifeval": "palaestra.envs.ifeval.env:IFEval"}
