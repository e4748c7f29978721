"""The child side of the verifiers v1 adapter: runs *inside the interpreter that has verifiers' v1 API*.

verifiers 0.4 (its v1 API only) pins ``mcp==2.0.0`` and ``openai>=2.54``, which cannot share Palaestra's
environment (and 0.3, the classic API, must keep working there), so ``verifiers_v1.py`` starts this file
with the other interpreter (a side venv) and speaks JSON lines over its stdin/stdout. The same file also
runs under the main interpreter when the installed verifiers has ``verifiers.v1`` (0.3 ships it), so one
code path serves both versions. It imports only the standard library and verifiers: never Palaestra,
which the side venv does not have. Requests are ``{"id", "op", ...}``; each answer is ``{"id", "ok":
true, "result"}`` or ``{"id", "ok": false, "kind", "message"}`` with kind ``tool`` (the tool's own
error: the model reads it), ``unsupported`` (a configuration the adapter cannot mirror), ``session`` (a
session this process does not know) or ``error``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import traceback
from typing import Any


class Refused(Exception):
    """Something this bridge does not mirror; the message names it."""


class Lost(Exception):
    """A session this process never opened: the parent's child was replaced since (its state is gone)."""


class ToolFailed(Exception):
    """A tool raised: its error goes back to the model, as verifiers' MCP servers answer it."""


def _chat(message: Any) -> dict[str, Any]:
    """A v1 message (pydantic) as an OpenAI chat message."""
    data = message.model_dump(mode="json", exclude_none=True)
    calls = data.pop("tool_calls", None)
    if calls:
        data["tool_calls"] = [{"id": c["id"], "type": "function",
                               "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return data


def _v1_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message as the dict verifiers' v1 ``Message`` union validates."""
    out = {k: v for k, v in message.items() if k in ("role", "content", "tool_call_id", "name", "reasoning_content")}
    if message.get("role") == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = []
        for call in message["tool_calls"]:
            fn = call.get("function") or call
            args = fn.get("arguments", "{}")
            out["tool_calls"].append({"id": str(call.get("id") or fn.get("name")), "name": fn["name"],
                                      "arguments": args if isinstance(args, str) else json.dumps(args)})
    if out.get("role") in ("system", "user", "tool") and out.get("content") is None:
        out["content"] = ""
    return out


def _schema(fn: Any) -> dict[str, Any]:
    """The JSON schema of a tool's parameters, from its signature (as MCP's tool registration does)."""
    from typing import get_type_hints

    from pydantic import create_model

    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        fields[name] = (hints.get(name, Any), ... if param.default is param.empty else param.default)
    schema = create_model(f"{fn.__name__}_arguments", **fields).model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


class Bridge:
    def __init__(self) -> None:
        self.tasks: list[Any] = []
        self.agent: Any = None
        self.shared: list[Any] = []
        self.sessions: dict[str, dict[str, tuple[Any, Any, Any]]] = {}

    # ---- load ----------------------------------------------------------------------------------
    async def load(self, taskset: str, taskset_args: dict[str, Any], env_args: dict[str, Any],
                   paths: list[str], limit: int | None) -> dict[str, Any]:
        sys.path[:0] = [p for p in paths if p not in sys.path]
        import verifiers
        from verifiers.v1.envs.single_agent import SingleAgentEnv
        from verifiers.v1.utils import loaders

        config = loaders.resolve_env_config({**env_args, "taskset": {**taskset_args, "id": taskset}})
        env_cls = loaders.environment_class(config.taskset.id, config.id)
        if env_cls.run is not SingleAgentEnv.run:
            raise Refused(f"{env_cls.__name__} drives the episode itself (its own run(): the environment plays "
                          "the user or several agents); only single-agent tasksets, whose rewards are the task's "
                          "@vf.reward functions, are mirrored")
        loaded = loaders.load_taskset(config.taskset)
        if limit is not None:
            loaded = loaded.head(limit)
        elif getattr(loaded, "INFINITE", False):
            raise Refused(f"taskset '{taskset}' is infinite: give the adapter a limit")
        self.tasks = list(loaded)
        self.agent = getattr(config, "agent", None)
        self.shared = list(type(loaded).toolsets(loaded.config))
        for toolset in self.shared:
            await toolset.setup()
        tools: list[dict[str, Any]] = []
        probe = self._toolsets(self.tasks[0]) if self.tasks else []
        for toolset in [*self.shared, *probe]:
            for name, fn in self._tools(toolset).items():
                doc = inspect.getdoc(fn) or ""
                tools.append({"type": "function", "function": {"name": name, "description": doc,
                                                               "parameters": _schema(fn)}})
        rows = []
        for task in self.tasks:
            data = task.data
            rows.append({"key": str(task.key), "name": data.name, "messages": self._prompt(task),
                         "data": data.model_dump(mode="json", exclude_none=True),
                         "rewards": {fn.__name__: float(getattr(fn, "_vf_weight", 1.0))
                                     for fn in task.hooks("reward")}})
        return {"version": verifiers.__version__, "python": sys.version.split()[0], "tasks": rows, "tools": tools,
                "max_turns": getattr(self.agent, "max_turns", None), "env": env_cls.__name__}

    @staticmethod
    def _prompt(task: Any) -> list[dict[str, Any]]:
        data = task.data
        messages: list[dict[str, Any]] = []
        if data.system_prompt:
            messages.append({"role": "system", "content": data.system_prompt})
        if isinstance(data.prompt, str):
            messages.append({"role": "user", "content": data.prompt})
        else:
            messages.extend(_chat(m) for m in data.prompt or [])
        return messages

    @staticmethod
    def _toolsets(task: Any) -> list[Any]:
        return list(type(task).toolsets(task.config))

    @staticmethod
    def _tools(toolset: Any) -> dict[str, Any]:
        """The toolset's ``@vf.tool`` methods under the names verifiers advertises (``<server>_<tool>``)."""
        from verifiers.v1.utils.decorators import discover_decorated

        prefix = toolset.server_name
        out = {}
        for fn in discover_decorated(toolset, "tool"):
            name = getattr(fn, "tool_name", None) or fn.__name__
            out[f"{prefix}_{name}" if prefix else name] = fn
        return out

    # ---- sessions and tools --------------------------------------------------------------------
    async def open(self, session: str, index: int) -> None:
        task = self.tasks[index]
        tools: dict[str, tuple[Any, Any, Any]] = {}
        for toolset in self.shared:
            tools.update({n: (toolset, fn, toolset._state_cls()) for n, fn in self._tools(toolset).items()})
        for toolset in self._toolsets(task):  # per rollout, as verifiers launches a task's servers
            await toolset.setup()
            await toolset.setup_task(task)
            state = toolset._state_cls()
            tools.update({n: (toolset, fn, state) for n, fn in self._tools(toolset).items()})
        self.sessions[session] = tools

    async def call(self, session: str, name: str, arguments: dict[str, Any]) -> Any:
        from verifiers.v1.mcp.server import _call_state

        tools = self.sessions.get(session)
        if tools is None:
            raise Lost(f"unknown session '{session}' (the verifiers process was restarted)")
        if name not in tools:
            raise ToolFailed(f"unknown tool '{name}'")
        _, fn, state = tools[name]
        token = _call_state.set(state)  # the tool's `self.state`, one per rollout
        try:
            result = fn(**arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            raise ToolFailed(f"{type(exc).__name__}: {exc}") from None
        finally:
            _call_state.reset(token)
        if hasattr(result, "model_dump"):
            return result.model_dump(mode="json")
        return result if isinstance(result, (str, int, float, bool, list, dict)) or result is None else str(result)

    async def close(self, session: str) -> None:
        self.sessions.pop(session, None)

    # ---- scoring -------------------------------------------------------------------------------
    async def score(self, index: int, messages: list[dict[str, Any]], truncated: bool) -> dict[str, Any]:
        """The task's own ``score`` over a trace built from the conversation, as verifiers records it."""
        from pydantic import TypeAdapter
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask
        from verifiers.v1.types import Message

        task = self.tasks[index]
        needs = [fn.__name__ for fn in task.hooks("reward")
                 if (p := inspect.signature(fn).parameters.get("runtime")) is not None and p.default is p.empty]
        if needs:
            raise Refused(f"reward functions {needs} need verifiers' sandbox runtime, which this adapter does not "
                          "provide")
        adapter = TypeAdapter(Message)
        prompt_len = len(self._prompt(task))
        nodes = [MessageNode(parent=i - 1 if i else None, message=adapter.validate_python(_v1_message(m)),
                             sampled=i >= prompt_len and m.get("role") == "assistant")
                 for i, m in enumerate(messages)]
        if self.agent is None:
            from verifiers.v1 import AgentConfig

            self.agent = AgentConfig()
        agent = self.agent
        trace = Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                      agent=AgentInfo(config=agent), nodes=nodes)
        trace.ok = True
        trace.stop("max_turns" if truncated else "agent_completed")
        await task.score(trace, None)
        unscored = sorted(k for k, r in trace.rewards.items() if r is None)
        if unscored:
            raise Refused(f"reward functions {unscored} gave no score")
        return {"reward": float(trace.reward), "metrics": {k: v for k, v in trace.metrics.items() if v is not None},
                "rewards": {k: {"score": r.score, "weight": r.weight} for k, r in trace.rewards.items() if r}}


def main() -> None:
    # Run as a script, this file's folder would come first on sys.path and its sibling verifiers.py (the
    # classic adapter) would shadow the verifiers package: drop it (the parent also starts Python with -I).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the environment prints must not corrupt the answers
    bridge = Bridge()
    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        ident, op = request.pop("id", None), request.pop("op", "")
        try:
            handler = getattr(bridge, op, None) if op in ("load", "open", "call", "close", "score") else None
            if handler is None:
                raise Refused(f"unknown op '{op}'")
            answer: dict[str, Any] = {"id": ident, "ok": True, "result": loop.run_until_complete(handler(**request))}
        except ToolFailed as exc:
            answer = {"id": ident, "ok": False, "kind": "tool", "message": str(exc)}
        except Refused as exc:
            answer = {"id": ident, "ok": False, "kind": "unsupported", "message": str(exc)}
        except Lost as exc:
            answer = {"id": ident, "ok": False, "kind": "session", "message": str(exc)}
        except Exception as exc:  # reported, never fatal: the parent maps it to a typed failure
            tail = "".join(traceback.format_exception(exc)[-3:])
            answer = {"id": ident, "ok": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}",
                      "traceback": tail}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
