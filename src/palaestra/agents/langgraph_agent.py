"""A user's LangGraph graph as a harness.

The graph is built per rollout by a function ``build(llm, tools) -> compiled graph`` over LangChain
objects that are thin faces of Palaestra's own: ``PalaestraChatModel`` sends every LLM call through the
rollout's ChatModel (the model proxy, so each call is recorded for the rollout, whatever the graph
does), and each environment tool becomes a LangChain tool that calls ``ToolSurface``. The graph state
must hold ``messages`` (``MessagesState`` or a superset). Without a build function, a ReAct graph
(model node ⇄ prebuilt ``ToolNode``) is used.

Tool calls of one turn, which ``ToolNode`` runs concurrently, reach the environment one at a time in
the model's order, so a stateful environment sees what the model asked for, and replays the same.
Needs the ``langgraph`` package (``pip install 'palaestra[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.errors import GraphRecursionError

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.agents.tool_agent import first_message, render_tool_result
from palaestra.core.errors import ConfigError
from palaestra.core.records import Task, Trajectory
from palaestra.wire.env import SessionHandle

GraphBuilder = Callable[[BaseChatModel, list[BaseTool]], Any]
_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("palaestra_tool_call_id", default=None)
_PASSED = ("tools", "tool_choice", "parallel_tool_calls", "response_format")


def ai_message(msg: dict[str, Any], resp: dict[str, Any]) -> AIMessage:
    """An OpenAI assistant message as an AIMessage; arguments that are not a JSON object become
    ``invalid_tool_calls`` (LangChain's place for them) rather than an exception."""
    calls, invalid = [], []
    for i, call in enumerate(msg.get("tool_calls") or []):
        fn = call.get("function") or {}
        raw = fn.get("arguments") or "{}"
        call_id = call.get("id") or f"call_{i}"
        try:
            args = orjson.loads(raw) if isinstance(raw, str) else raw
        except orjson.JSONDecodeError:
            args = None
        if isinstance(args, dict) and fn.get("name"):
            calls.append({"name": fn["name"], "args": args, "id": call_id, "type": "tool_call"})
        else:
            invalid.append({"name": fn.get("name"), "args": raw, "id": call_id,
                            "error": "arguments are not a JSON object", "type": "invalid_tool_call"})
    usage = resp.get("usage") or {}
    extra: dict[str, Any] = {}
    if usage:
        extra["usage_metadata"] = {"input_tokens": int(usage.get("prompt_tokens") or 0),
                                   "output_tokens": int(usage.get("completion_tokens") or 0),
                                   "total_tokens": int(usage.get("total_tokens") or 0)}
    meta = {"finish_reason": (resp.get("choices") or [{}])[0].get("finish_reason"), "model_name": resp.get("model")}
    return AIMessage(content=msg.get("content") or "", tool_calls=calls, invalid_tool_calls=invalid,
                     response_metadata=meta, id=resp.get("id"), **extra)


class PalaestraChatModel(BaseChatModel):
    """A LangChain chat model over a Palaestra ``ChatModel``. Async only: graphs run with ``ainvoke``.
    The run's ``sampling`` settings override whatever the graph binds."""

    client: Any
    sampling: dict[str, Any] = {}
    model_name: str = "palaestra"

    @property
    def _llm_type(self) -> str:
        return "palaestra"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        formatted = [convert_to_openai_tool(t) for t in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        raise ConfigError("PalaestraChatModel is async only", hint="run the graph with ainvoke/astream")

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        body: dict[str, Any] = {"model": self.model_name, "messages": convert_to_openai_messages(messages)}
        body.update({k: v for k, v in kwargs.items() if k in _PASSED and v is not None})
        if stop:
            body["stop"] = stop
        body.update(self.sampling)
        resp = await self.client.chat(body)
        return ChatResult(generations=[ChatGeneration(message=ai_message(first_message(resp), resp))])


class EnvTool(BaseTool):
    """One environment tool. Errors come back as text the model reads (as with the tool agent);
    infrastructure failures propagate and fail the rollout."""

    surface: Any
    lock: Any

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise ConfigError(f"environment tool '{self.name}' is async only", hint="run the graph with ainvoke")

    async def arun(self, tool_input: str | dict[str, Any], *args: Any, tool_call_id: str | None = None,
                   **kwargs: Any) -> Any:
        token = _CALL_ID.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, tool_call_id=tool_call_id, **kwargs)
        finally:
            _CALL_ID.reset(token)

    async def _arun(self, *args: Any, **kwargs: Any) -> str:
        kwargs.pop("run_manager", None)
        async with self.lock:
            result = await self.surface.call(self.name, kwargs, _CALL_ID.get())
        return render_tool_result(result)


def surface_tools(tools: ToolSurface) -> list[BaseTool]:
    """The session's tools as LangChain tools (schemas passed through unchanged)."""
    lock = asyncio.Lock()  # FIFO: concurrent calls of one turn run in the order ToolNode started them
    out: list[BaseTool] = []
    for schema in tools.schemas:
        fn = schema.get("function") or {}
        if not fn.get("name"):
            continue
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append(EnvTool(name=fn["name"], description=fn.get("description") or fn["name"], args_schema=params,
                           surface=tools, lock=lock))
    return out


def react_graph(llm: BaseChatModel, tools: list[BaseTool]) -> Any:
    """The default graph: the model node, and the prebuilt ToolNode while the model calls tools."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    bound = llm.bind_tools(tools) if tools else llm

    async def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_edge(START, "model")
    if tools:
        graph.add_node("tools", ToolNode(tools))
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
    return graph.compile()


def load_builder(spec: str) -> GraphBuilder:
    """``"package.module:function"`` → the graph builder it names."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"graph spec {spec!r} is not 'module:function'",
                          hint="name a function build(llm, tools) -> compiled graph, e.g. mypkg.graphs:build")
    try:
        builder = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load graph builder {spec!r}: {exc}", hint="check the module path") from None
    if not callable(builder):
        raise ConfigError(f"graph builder {spec!r} is not callable")
    return builder


class LangGraphAgent:
    """Runs ``build(llm, tools)``'s graph on the task's messages. ``max_steps`` bounds model turns (the
    graph's recursion limit is set from it); hitting it ends the rollout with ``stop_reason=max_steps``."""

    def __init__(self, build: GraphBuilder | str | None = None, *, max_steps: int = 16,
                 name: str = "langgraph") -> None:
        self.build: GraphBuilder = load_builder(build) if isinstance(build, str) else (build or react_graph)
        self.max_steps = max_steps
        self.name = name

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        llm = PalaestraChatModel(client=model, sampling=dict(sampling))
        graph = self.build(llm, surface_tools(tools))
        state: dict[str, Any] = {"messages": convert_to_messages(list(session.messages))}
        stop = "final"
        try:
            async for values in graph.astream(state, config={"recursion_limit": 2 * self.max_steps + 1},
                                              stream_mode="values"):
                state = values
        except GraphRecursionError:
            stop = "max_steps"
        messages: list[BaseMessage] = list(state.get("messages") or [])
        answers = [m for m in messages if isinstance(m, AIMessage)]
        final = None
        if stop == "final" and answers and not answers[-1].tool_calls:
            final = answers[-1].text if hasattr(answers[-1], "text") else str(answers[-1].content)
        return Trajectory(messages=convert_to_openai_messages(messages), tool_calls=tools.records,
                          final_answer=final, steps=len(answers), stop_reason=stop)


def langgraph_agent(max_steps: int = 16, graph: str | None = None) -> LangGraphAgent:
    """Registry factory: the default ReAct graph, or ``graph="module:function"``."""
    return LangGraphAgent(graph, max_steps=max_steps)
