"""``tool_call``: single-step tool use. Each task brings its own tools (``task.tools``, OpenAI function
schemas); the model's calls are compared with ``metadata.expected_calls`` by name and typed arguments,
order-insensitive for parallel calls.

The tools are per task, so they are not ``@tool`` methods: the environment answers them through the
``dynamic_tool(state, name, arguments)`` hook, which the session host calls for a name that is not a
static tool. Verification reads the calls from the trajectory, so scoring never depends on the tools
having been executed (an agent that only records the model's calls is scored the same way).

``nemo_compat`` (constructor, ``eval run --nemo-compat`` or a row's ``metadata.nemo_compat``) grades a
NeMo Gym row exactly as the NeMo Gym server it was written for does (``nemo.py``: xlam_fc, single-step
argument comparison, multireward); rows of no such server keep Palaestra's comparison.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import BadArguments, InvalidTask, UnknownTool
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.envs.tool_call import nemo
from palaestra.envs.tool_call.match import ONE_OF, Call, argument_problems, max_matching


@dataclass
class ToolCallState:
    """A session: the task's tools by name and every call the model made through them."""

    task: Task
    tools: dict[str, dict[str, Any]]
    calls: list[Call] = field(default_factory=list)


def _functions(task: Task) -> dict[str, dict[str, Any]]:
    """The task's tools by name (``function`` part of each schema); ValueError names a bad one."""
    out: dict[str, dict[str, Any]] = {}
    for i, spec in enumerate(task.tools or []):
        fn = spec.get("function") if isinstance(spec, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or spec.get("type") != "function":
            raise ValueError(f"tools[{i}] is not an OpenAI function tool "
                             '({"type": "function", "function": {"name": ..., "parameters": {...}}})')
        fn = {**fn, "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}
        if not isinstance(fn["parameters"], dict) or fn["parameters"].get("type") != "object":
            raise ValueError(f"tools[{i}] ({fn['name']}): parameters must be a JSON Schema of type object")
        out[fn["name"]] = fn
    return out


def _first_options(value: Any) -> Any:
    """An expected value with every ``$one_of`` replaced by its first option: a concrete gold call."""
    if isinstance(value, dict):
        if set(value) == {ONE_OF}:
            return _first_options(value[ONE_OF][0])
        return {k: _first_options(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_first_options(v) for v in value]
    return value


def _schema_errors(fn: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    import jsonschema

    schema = fn["parameters"]
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
            for e in sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))]


def _raw_calls(trajectory: Trajectory, prompt_length: int = 0) -> list[tuple[str, Any]]:
    """The model's calls as (name, arguments as recorded): the recorded tool calls, else those in assistant
    messages after the prompt's ``prompt_length`` messages (a task's input may hold a conversation so far,
    whose calls are not this rollout's)."""
    raw: list[tuple[str, Any]] = [(r.name, r.arguments) for r in trajectory.tool_calls]
    if not raw:
        for message in trajectory.messages[prompt_length:]:
            if message.get("role") == "assistant":
                for call in message.get("tool_calls") or []:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                        raw.append((fn["name"], fn.get("arguments")))
    return raw


def _actual_calls(trajectory: Trajectory, prompt_length: int = 0) -> list[Call]:
    """The model's calls (``_raw_calls``); a call whose arguments were not a JSON object keeps
    ``arguments=None`` (it matches nothing)."""
    calls: list[Call] = []
    for name, args in _raw_calls(trajectory, prompt_length):
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                args = None
        calls.append(Call(name, args if isinstance(args, dict) else None))
    return calls


def _nemo_reply(trajectory: Trajectory, prompt_length: int) -> nemo.Reply:
    """The reply as NeMo Gym's servers see it: arguments parsed as JSON text is (any JSON value, or
    ``UNPARSED``), and whether the reply holds assistant text (even empty: NeMo Gym counts the item)."""
    calls: list[tuple[str, Any]] = []
    for name, args in _raw_calls(trajectory, prompt_length):
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = nemo.UNPARSED
        calls.append((name, args))
    has_text = trajectory.final_answer is not None or any(
        m.get("role") == "assistant" and m.get("content") for m in trajectory.messages[prompt_length:])
    return nemo.Reply(calls, has_text)


class ToolCallEnv(Environment):
    """Single-step function calling, scored against the expected call(s)."""

    name = "tool_call"
    version = "0.1"
    description = "Call the right tool(s) with the right typed arguments; parallel calls in any order."
    domain = "tool use"
    mechanism = "multi-turn tools"

    def __init__(self, *, nemo_compat: bool = False) -> None:
        """``nemo_compat``: grade NeMo Gym rows as their NeMo Gym server does (``nemo.py``) for every task
        that does not set ``metadata.nemo_compat`` itself. Off by default: Palaestra's comparison."""
        self.nemo_compat = nemo_compat

    def check_task(self, task: Task) -> None:
        flag = task.metadata.get("nemo_compat")
        if flag is not None and not isinstance(flag, bool):
            raise InvalidTask(f"tool_call task '{task.id}': metadata.nemo_compat must be true or false, got {flag!r}")
        # Under nemo_compat a NeMo Gym row loads even where its expected call does not fit its own tool schema
        # (xlam_fc's data has `time_period: 14` for a string parameter): NeMo Gym grades such rows as they are.
        nemo_row = (flag if isinstance(flag, bool) else self.nemo_compat) and nemo.server_of(task.metadata) is not None
        try:
            tools = _functions(task)
        except ValueError as exc:
            raise InvalidTask(f"tool_call task '{task.id}': {exc}", hint="fix task.tools") from None
        expected = task.metadata.get("expected_calls")
        if not isinstance(expected, list):
            raise InvalidTask(f"tool_call task '{task.id}' has no metadata.expected_calls list",
                              hint='add [{"name": "get_weather", "arguments": {"city": "Paris"}}]')
        for i, call in enumerate(expected):
            if not isinstance(call, dict) or call.get("name") not in tools:
                raise InvalidTask(f"tool_call task '{task.id}': expected_calls[{i}] names no tool of task.tools",
                                  hint=f"tools: {', '.join(sorted(tools))}")
            args = call.get("arguments", {})
            if not isinstance(args, dict):
                raise InvalidTask(f"tool_call task '{task.id}': expected_calls[{i}].arguments must be an object")
            errors = _schema_errors(tools[call["name"]], _first_options(args))
            if errors and not nemo_row:
                raise InvalidTask(f"tool_call task '{task.id}': expected_calls[{i}] does not fit the schema of "
                                  f"'{call['name']}': {'; '.join(errors)}", hint="fix the call or the tool schema")

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        return [dict(t) for t in (task.tools or [])] if task is not None else []

    def seed(self, task: Task) -> ToolCallState:
        self.check_task(task)
        return ToolCallState(task=task, tools=_functions(task))

    def dynamic_tool(self, state: ToolCallState, name: str, arguments: Any) -> Any:
        """Answer a call to one of the task's tools: validate it, record it, return the canned result
        (``metadata.tool_results[name]``, else ``"ok"``)."""
        fn = state.tools.get(name)
        if fn is None:
            raise UnknownTool(f"unknown tool '{name}' in this tool_call task",
                              hint=f"available tools: {', '.join(sorted(state.tools)) or '(none)'}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                raise BadArguments(f"arguments for tool '{name}' are not valid JSON ({exc})",
                                   hint="send the arguments as one JSON object") from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise BadArguments(f"tool '{name}' takes a JSON object of arguments, got {type(arguments).__name__}",
                               hint="send the arguments as one JSON object")
        errors = _schema_errors(fn, arguments)
        if errors:
            raise BadArguments(f"invalid arguments for tool '{name}': {'; '.join(errors)}",
                               hint="fix the fields named above and call the tool again")
        state.calls.append(Call(name, arguments))
        results = state.task.metadata.get("tool_results") or {}
        return results.get(name, "ok")

    def verify(self, state: ToolCallState, trajectory: Trajectory) -> Verdict:
        meta = state.task.metadata
        expected = [Call(c["name"], dict(c.get("arguments") or {})) for c in meta["expected_calls"]]
        prompt = self.prompt(state.task)
        prompt_length = len(prompt) if trajectory.messages[:len(prompt)] == prompt else 0
        flag = meta.get("nemo_compat")
        server = nemo.server_of(meta) if (flag if isinstance(flag, bool) else self.nemo_compat) else None
        if server is not None:
            return self._nemo_verify(state, _nemo_reply(trajectory, prompt_length), server, expected)
        actual = _actual_calls(trajectory, prompt_length)
        normalize = bool(meta.get("normalize_strings", False))
        allow_extra = bool(meta.get("allow_extra_arguments", False))

        def problems(e: Call, a: Call) -> list[str]:
            defaults = {k: p["default"] for k, p in state.tools[e.name]["parameters"].get("properties", {}).items()
                        if isinstance(p, dict) and "default" in p}
            return argument_problems(e, a, defaults, normalize, allow_extra)

        if meta.get("ordered"):
            grid = [[j == i and not problems(e, actual[j]) for j in range(len(actual))] for i, e in enumerate(expected)]
        else:
            grid = [[not problems(e, a) for a in actual] for e in expected]
        owner = max_matching(grid) if expected and actual else [-1] * len(actual)
        matched = {i for i in owner if i >= 0}
        names = max_matching([[a.name == e.name for a in actual] for e in expected]) \
            if expected and actual else []
        name_hits = sum(1 for i in names if i >= 0)
        denominator = max(len(expected), len(actual))
        reward = len(matched) / denominator if denominator else 1.0
        details = {}
        for i, e in enumerate(expected):
            if i not in matched:
                same_name = [a for a in actual if a.name == e.name]
                details[f"{i}.{e.name}"] = "; ".join(problems(e, same_name[0])) if same_name else "not called"
        n = len(expected) or 1
        return Verdict(
            reward=reward,
            passed=len(matched) == len(expected) == len(actual),
            components={"names": name_hits / n if expected else float(not actual),
                        "calls": len(matched) / n if expected else float(not actual),
                        "no_extra_calls": float(len(actual) <= len(matched))},
            metadata={"expected": len(expected), "made": len(actual), "matched": len(matched), "unmatched": details},
        )

    @staticmethod
    def _nemo_verify(state: ToolCallState, reply: nemo.Reply, server: str, expected: list[Call]) -> Verdict:
        """The verdict of NeMo Gym's ``server`` (``nemo_compat``): its reward, and its components."""
        meta = state.task.metadata
        wanted = [(c.name, c.arguments or {}) for c in expected]
        info: dict[str, Any] = {"nemo_compat": True, "read_as": server, "expected": len(expected),
                                "made": len(reply.calls)}
        if server == nemo.XLAM:
            reward, info["matched"] = nemo.xlam(wanted, reply)
            return Verdict(reward=reward, passed=reward == 1.0, components={"correct": reward}, metadata=info)
        if server == nemo.SINGLE_STEP:
            message = nemo.expects_message(meta, len(expected))
            reward, info["reason"] = nemo.single_step(None if message else wanted, reply, nemo.comparator(meta))
            return Verdict(reward=reward, passed=reward == 1.0, components={"correct": float(reward == 1.0)},
                           metadata=info)
        required = {name: list(fn["parameters"].get("required") or []) for name, fn in state.tools.items()}
        parts = nemo.multireward(wanted[0] if wanted else None, reply, required)
        total = sum(parts.values())
        return Verdict(reward=total, passed=total == len(parts), components=parts, metadata=info)

    def reference(self, task: Task) -> Reference:
        calls = [ToolCall(name=c["name"], arguments=_first_options(dict(c.get("arguments") or {})))
                 for c in task.metadata.get("expected_calls") or []]
        return Reference(tool_calls=calls, final_answer=str(task.metadata.get("reference_answer") or "Done."))
