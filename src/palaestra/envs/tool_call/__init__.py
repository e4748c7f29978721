"""Single-step tool use compared with the expected calls (``tool_call``)."""

# Discovered by palaestra.envs.registry; importing this package must stay cheap (no env.py import).
ENVIRONMENTS = {"tool_call": "palaestra.envs.tool_call.env:ToolCallEnv"}
