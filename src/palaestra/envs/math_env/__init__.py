"""Maths environment (registered as ``math``; the package is ``math_env`` so it never shadows the
standard library's ``math``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"math": "palaestra.envs.math_env.env:MathEnv"}
