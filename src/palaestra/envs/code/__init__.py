"""Python coding tasks graded by hidden unit tests in a sandbox (``code``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"code": "palaestra.envs.code.env:CodeEnv"}
