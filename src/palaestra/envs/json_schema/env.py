"""``json_schema``: structured outputs. The answer must hold a JSON value that validates against the
task's JSON Schema and carries the expected values, so both the form and the content are scored.
"""

from __future__ import annotations

import json
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.json_schema.extract import extract_json, is_missing, lookup, same, split_path


def _validator(schema: dict[str, Any]) -> Any:
    """A validator for the schema's own draft (``$schema``), with format checks switched on."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


class JSONSchema(Environment):
    """Structured output: parse the answer's JSON, validate it, compare expected values."""

    name = "json_schema"
    version = "0.1"
    description = "Answer with JSON that validates against a schema and holds the expected values."
    domain = "structured output"
    mechanism = "single-turn"

    def check_task(self, task: Task) -> None:
        import jsonschema

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

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        self.check_task(state)
        meta = state.metadata
        value, found_by, not_found = extract_json(trajectory.final_text())
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
            errors = sorted(_validator(meta["schema"]).iter_errors(value), key=lambda e: list(e.absolute_path))
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
        reward = sum(components.values()) / len(components)
        return Verdict(reward=reward, passed=all(v == 1.0 for v in components.values()),
                       components=components, metadata=metadata,
                       answer=json.dumps(value, sort_keys=True) if found_by else None)

    def reference(self, task: Task) -> Reference | None:
        ref = task.metadata.get("reference_answer")
        if ref is None:
            return None
        text = ref if isinstance(ref, str) else f"```json\n{json.dumps(ref, ensure_ascii=False)}\n```"
        return Reference(final_answer=text)
