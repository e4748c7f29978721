"""AWS's Strands Agents SDK (PyPI ``strands-agents``) as a harness: its own event loop, unmodified, over
its ``OpenAIModel`` provider (streaming Chat Completions, as it runs by default) pointed at the rollout's
loopback endpoint.

The environment's tools become ``PythonAgentTool``s with their JSON schemas as ``inputSchema``. Strands
has no turn limit of its own; the endpoint's call limit (``2 * max_steps + 4``) ends a loop that does not
stop, and the rollout is then ``stop_reason=max_steps``. Its OpenTelemetry tracing exports nothing unless
an exporter is configured, and none is. Strands raises ``MaxTokensReachedException`` when an answer is cut
at ``max_tokens``; that ends the rollout as a scored one with ``stop_reason=max_tokens`` (the model's doing,
not a harness failure).
"""

from __future__ import annotations

from typing import Any

from palaestra.agents.sdk.base import SDKAgent, SDKRun


class StrandsAgent(SDKAgent):
    name = "strands-agents"
    dialect = "chat"
    distribution = "strands-agents"
    pinned = "1.62.0"
    modules = ("strands", "openai")
    extra = "sdk"

    async def drive(self, run: SDKRun) -> tuple[str | None, str]:
        from strands import Agent
        from strands.models.openai import OpenAIModel
        from strands.tools.tools import PythonAgentTool
        from strands.types.exceptions import MaxTokensReachedException

        def make_tool(name: str, description: str, params: dict[str, Any]) -> Any:
            async def invoke(tool_use: Any, **_: Any) -> dict[str, Any]:
                text = await run.call_tool(name, tool_use.get("input") or {}, tool_use.get("toolUseId"))
                return {"toolUseId": tool_use.get("toolUseId"), "status": "success", "content": [{"text": text}]}

            spec = {"name": name, "description": description, "inputSchema": {"json": params}}
            return PythonAgentTool(name, spec, invoke)  # type: ignore[arg-type]

        model = OpenAIModel(client_args={"base_url": run.endpoint.openai_base, "api_key": run.endpoint.token,
                                         "max_retries": 0}, model_id=run.model)
        agent = Agent(model=model, tools=[make_tool(*spec) for spec in run.tool_specs()],
                      system_prompt=run.instructions or None, callback_handler=None)
        try:
            result = await agent.invoke_async(run.prompt)
        except MaxTokensReachedException:  # the model ran out of max_tokens: its answer, cut; not an SDK failure
            return None, "max_tokens"
        text = str(result).strip()
        return (text or None), "final"
