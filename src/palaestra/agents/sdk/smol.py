"""Hugging Face's smolagents (PyPI ``smolagents``) as a harness: its ``ToolCallingAgent`` loop, unmodified,
over ``OpenAIServerModel`` pointed at the rollout's loopback endpoint.

smolagents is synchronous, so its run goes to a worker thread and each tool call hops back to the event
loop the environment client lives on. Its loop ends when the model calls smolagents' own ``final_answer``
tool; past ``max_steps`` it asks the model for an answer once more and reports ``max_steps_error``, which
becomes ``stop_reason=max_steps``. Environment tool schemas become smolagents ``inputs`` (JSON types kept,
anything else ``any``; optional arguments ``nullable``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from palaestra.agents.sdk.base import SDKAgent, SDKRun

_TYPES = {"string", "boolean", "integer", "number", "array", "object", "null"}


def smol_inputs(params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A JSON-schema ``parameters`` object as smolagents' ``inputs`` mapping."""
    required = set(params.get("required") or [])
    out: dict[str, dict[str, Any]] = {}
    for key, prop in (params.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        entry: dict[str, Any] = {"type": kind if isinstance(kind, str) and kind in _TYPES else "any",
                                 "description": str(prop.get("description") or key)}
        if key not in required:
            entry["nullable"] = True
        out[str(key)] = entry
    return out


class SmolagentsAgent(SDKAgent):
    name = "smolagents"
    dialect = "chat"
    distribution = "smolagents"
    pinned = "1.26.0"
    modules = ("smolagents", "openai")
    extra = "sdk"

    async def drive(self, run: SDKRun) -> tuple[str | None, str]:
        from smolagents import OpenAIServerModel, Tool, ToolCallingAgent
        from smolagents.monitoring import LogLevel

        def make_tool(name: str, description: str, params: dict[str, Any]) -> Any:
            class EnvTool(Tool):
                skip_forward_signature_validation = True

                def forward(self, **kwargs: Any) -> str:
                    args = {k: v for k, v in kwargs.items() if v is not None}
                    return run.call_tool_sync(self.name, args)

            EnvTool.name = name
            EnvTool.description = description
            EnvTool.inputs = smol_inputs(params)
            EnvTool.output_type = "string"
            return EnvTool()

        model = OpenAIServerModel(model_id=run.model, api_base=run.endpoint.openai_base, api_key=run.endpoint.token,
                                  client_kwargs={"max_retries": 0})
        agent = ToolCallingAgent(tools=[make_tool(*spec) for spec in run.tool_specs()], model=model,
                                 max_steps=run.max_steps, instructions=run.instructions or None,
                                 verbosity_level=LogLevel.OFF)
        result = await asyncio.to_thread(agent.run, run.prompt, return_full_result=True)
        out = result.output
        final = out if isinstance(out, str) else (None if out is None else str(out))
        return final, "max_steps" if result.state == "max_steps_error" else "final"
