"""OpenAI's Agents SDK (PyPI ``openai-agents``) as a harness: its own ``Runner`` loop, unmodified, with an
``OpenAIChatCompletionsModel`` whose ``AsyncOpenAI`` client points at the rollout's loopback endpoint.

The environment's tools become ``FunctionTool``s with their schemas passed through (``strict_json_schema``
off: environment schemas are not written for OpenAI's strict mode). Tracing is off: it would export to
OpenAI's servers. ``max_turns`` is the agent's ``max_steps``; ``MaxTurnsExceeded`` ends the rollout with
``stop_reason=max_steps``, as for every other harness.
"""

from __future__ import annotations

from typing import Any

from palaestra.agents.sdk.base import SDKAgent, SDKRun


class OpenAIAgentsAgent(SDKAgent):
    name = "openai-agents"
    dialect = "chat"
    distribution = "openai-agents"
    pinned = "0.24.0"
    modules = ("agents", "openai")
    extra = "sdk"

    async def drive(self, run: SDKRun) -> tuple[str | None, str]:
        from agents import Agent, FunctionTool, OpenAIChatCompletionsModel, RunConfig, Runner
        from agents.exceptions import MaxTurnsExceeded
        from openai import AsyncOpenAI

        def tool(name: str, description: str, params: dict[str, Any]) -> FunctionTool:
            async def invoke(ctx: Any, arguments: str) -> str:
                return await run.call_tool(name, arguments, getattr(ctx, "tool_call_id", None))

            return FunctionTool(name=name, description=description, params_json_schema=params,
                                on_invoke_tool=invoke, strict_json_schema=False)

        client = AsyncOpenAI(base_url=run.endpoint.openai_base, api_key=run.endpoint.token, max_retries=0)
        try:
            agent = Agent(name="palaestra", instructions=run.instructions or None,
                          tools=[tool(*spec) for spec in run.tool_specs()],
                          model=OpenAIChatCompletionsModel(model=run.model, openai_client=client))
            items: list[Any] = [{"role": m["role"], "content": m.get("content") or ""} for m in run.messages
                                if m.get("role") in ("user", "assistant")]
            try:
                result = await Runner.run(agent, items or run.prompt, max_turns=run.max_steps,
                                          run_config=RunConfig(tracing_disabled=True))
            except MaxTurnsExceeded:
                return None, "max_steps"
        finally:
            await client.close()
        out = result.final_output
        return (out if isinstance(out, str) else None if out is None else str(out)), "final"
