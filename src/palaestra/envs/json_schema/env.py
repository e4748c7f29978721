"""``json_schema``: structured outputs. The answer must hold a JSON value that validates against the
task's JSON Schema and carries the expected values, so both the form and the content are scored.

The answer is the reply's text, or, when the row names ``metadata.answer_tool`` (NeMo Gym's structured
outputs with ``response_mode: tool_call``), the arguments of the model's last call of that tool (its
``answer_tool_key`` member when given). A row whose ``schema_format`` is not JSON (CSV, YAML, TOML) is
refused: only JSON answers are validated here.

``nemo_compat`` (constructor, or a row's ``metadata.nemo_compat``) grades as NeMo Gym 0.7's
structured_outputs server does (docs/nemo_gym_parity.md): the reply must make exactly one function call,
of the answer tool (two calls, even of the same tool, score 0); a text answer is the whole reply as JSON
(no fenced or embedded block); the schema is made strict first (every declared property required, no
others allowed); the reward is 1 or 0. Off (the default), the last call of the answer tool counts and the
reward is the mean of its parts.
"""

from __future__ import annotations

import json
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.envs.json_schema.extract import extract_json, is_missing, lookup, same, split_path
from palaestra.envs.json_schema.instance import minimal_instance


def _validator(schema: dict[str, Any]) -> Any:
    """A validator for the schema's own draft (``$schema``), with format checks switched on."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _tool_name(tool: Any) -> str | None:
    """A tool's name in either shape: Chat Completions (``function.name``) or flat Responses (``name``)."""
    if not isinstance(tool, dict):
        return None
    fn = tool.get("function")
    name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
    return name if isinstance(name, str) else None


def _strict(schema: Any) -> Any:
    """A copy of ``schema`` in which every object with ``properties`` requires them all and allows no others
    (what NeMo Gym's verifier does to a schema before validating)."""
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["required"], out["additionalProperties"] = list(out["properties"]), False
    return out


def _nemo_answer(state: Task, trajectory: Trajectory) -> tuple[Any, str | None, str | None]:
    """The answer as NeMo Gym's structured_outputs server reads it (see the module docstring)."""
    tool = state.metadata.get("answer_tool")
    if not tool:
        text = trajectory.final_text()
        if not text.strip():
            return None, None, "empty_response"
        try:
            return json.loads(text), "whole", None
        except ValueError:
            return None, None, "invalid_json"
    calls = trajectory.tool_calls
    if len(calls) != 1:
        return None, None, "missing_tool_call" if not calls else "multiple_tool_calls"
    if calls[0].name != tool:
        return None, None, "wrong_tool_name"
    return _tool_payload(state, tool, calls[0].arguments)


def _tool_payload(state: Task, tool: str, args: Any) -> tuple[Any, str | None, str | None]:
    """The answer inside the answer tool's arguments: parsed when a string, under ``answer_tool_key``
    when the row names one."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None, None, "tool_arguments_not_json"
    key = state.metadata.get("answer_tool_key")
    if key:
        if not isinstance(args, dict) or key not in args:
            return None, None, "missing_tool_payload_key"
        args = args[key]
    return args, f"tool:{tool}", None


class JSONSchema(Environment):
    """Structured output: parse the answer's JSON, validate it, compare expected values."""

    def __init__(self, *, nemo_compat: bool = False) -> None:
        self.nemo_compat = nemo_compat

    name = "json_schema"
    version = "0.1"
    description = "Answer with JSON that validates against a schema and holds the expected values."
    domain = "structured output"
    mechanism = "single-turn"

    def check_task(self, task: Task) -> None:
        import jsonschema

        fmt = task.metadata.get("schema_format")
        if fmt is not None and str(fmt).lower() != "json":
            raise InvalidTask(f"json_schema task '{task.id}': metadata.schema_format is {fmt!r}; only JSON answers "
                              "are validated", hint="use rows whose schema_type is json")
        tool = task.metadata.get("answer_tool")
        if tool is not None and not isinstance(tool, str):
            raise InvalidTask(f"json_schema task '{task.id}': metadata.answer_tool must be a tool name")
        schema = task.metadata.get("schema")
        if not isinstance(schema, dict):
            raise InvalidTask(f"json_schema task '{task.id}' has no metadata.schema object",
                              hint='add a JSON Schema, e.g. {"type": "object", "properties": {...}}')
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InvalidTask(f"json_schema task '{task.id}': metadata.schema is not a valid JSON Schema: "
                              f"{exc.message}", hint="fix the schema in the task file") from None
        expected = task.metadata.get("expected", {})
        if not isinstance(expected, dict):
            raise InvalidTask(f"json_schema task '{task.id}': metadata.expected must map paths to values",
                              hint='e.g. {"name": "Ada", "address.city": "Paris", "tags[0]": "x"}')
        for path in expected:
            try:
                split_path(path)
            except ValueError as exc:
                raise InvalidTask(f"json_schema task '{task.id}': metadata.expected: {exc}") from None
        ref = task.metadata.get("reference_answer")
        if ref is not None and not isinstance(ref, (dict, list, str)):
            raise InvalidTask(f"json_schema task '{task.id}': metadata.reference_answer must be JSON or text")

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """Show the schema under the request unless ``metadata.show_schema`` is false."""
        messages = super().prompt(task)
        if task.metadata.get("show_schema", True) is False:
            return messages
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users or not isinstance(messages[users[-1]].get("content"), str):
            return messages
        schema = json.dumps(task.metadata.get("schema"), indent=2, ensure_ascii=False)
        last = messages[users[-1]]
        messages[users[-1]] = {**last, "content": f"{last['content'].rstrip()}\n\nAnswer with one JSON value "
                               f"that validates against this JSON Schema:\n```json\n{schema}\n```"}
        return messages

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        """A row that answers through a tool offers the row's tools (the answer tool and its distractors)."""
        if task is not None and task.metadata.get("answer_tool"):
            return [dict(t) for t in task.tools or []]
        return super().tool_schemas(task)

    def dynamic_tool(self, state: Task, name: str, arguments: Any) -> Any:
        """The row's tools only take the answer: each call is acknowledged; the last answer-tool call counts."""
        if state.metadata.get("answer_tool") and any(_tool_name(t) == name for t in state.tools or []):
            return "ok"
        return super().dynamic_tool(state, name, arguments)

    def _answer(self, state: Task, trajectory: Trajectory) -> tuple[Any, str | None, str | None]:
        tool = state.metadata.get("answer_tool")
        if not tool:
            return extract_json(trajectory.final_text())
        calls = [r.arguments for r in trajectory.tool_calls if r.name == tool]
        if not calls:
            return None, None, f"no_{tool}_call"
        return _tool_payload(state, tool, calls[-1])

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        self.check_task(state)
        meta = state.metadata
        flag = meta.get("nemo_compat")
        compat = flag if isinstance(flag, bool) else self.nemo_compat
        value, found_by, not_found = (_nemo_answer if compat else self._answer)(state, trajectory)
        expected: dict[str, Any] = meta.get("expected") or {}
        normalize = bool(meta.get("normalize_strings", False))
        components = {"parse": 0.0, "schema": 0.0}
        if expected:
            components["values"] = 0.0
        metadata: dict[str, Any] = {}
        if found_by is None:
            metadata["reason"] = not_found or "no_json_found"
        else:
            metadata["found_by"] = found_by
            components["parse"] = 1.0
            schema = _strict(meta["schema"]) if compat else meta["schema"]
            errors = sorted(_validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
            components["schema"] = 0.0 if errors else 1.0
            if errors:
                metadata["schema_errors"] = [
                    f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"[:300] for e in errors[:5]]
            if expected:
                wrong: dict[str, Any] = {}
                for path, want in expected.items():
                    got = lookup(value, path)
                    if is_missing(got):
                        wrong[path] = "missing"
                    elif not same(want, got, normalize_strings=normalize):
                        wrong[path] = got
                components["values"] = (len(expected) - len(wrong)) / len(expected)
                if wrong:
                    metadata["wrong_values"] = wrong
        passed = all(v == 1.0 for v in components.values())
        reward = float(passed) if compat else sum(components.values()) / len(components)
        if compat:
            metadata["nemo_compat"] = True
        return Verdict(reward=reward, passed=passed,
                       components=components, metadata=metadata,
                       answer=json.dumps(value, sort_keys=True) if found_by else None)

    def reference(self, task: Task) -> Reference | None:
        """The row's ``reference_answer``; without one (a row that states only its schema, and no expected
        values), the smallest instance of the schema that its validator accepts."""
        ref = task.metadata.get("reference_answer")
        schema = task.metadata.get("schema")
        if ref is None and not task.metadata.get("expected") and isinstance(schema, dict):
            candidate = minimal_instance(schema)
            if not any(True for _ in _validator(schema).iter_errors(candidate)):
                ref = candidate
        if ref is None:
            return None
        tool = task.metadata.get("answer_tool")
        if tool:
            key = task.metadata.get("answer_tool_key")
            try:
                payload = json.loads(ref) if isinstance(ref, str) else ref
            except ValueError:  # a text reference that is no JSON: no tool call can carry it
                return None
            return Reference(tool_calls=[ToolCall(name=str(tool), arguments={key: payload} if key else payload)],
                             final_answer="Done.")
        text = ref if isinstance(ref, str) else f"```json\n{json.dumps(ref, ensure_ascii=False)}\n```"
        return Reference(final_answer=text)
