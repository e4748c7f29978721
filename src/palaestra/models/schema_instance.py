"""A small JSON value that a JSON Schema accepts, for the scripted ``format`` policy.

A scripted judge that answers a fixed text fails every verifier that asks its judge for structured output
(``response_format: json_schema``, as NeMo Gym's bbq and others do): the verifier cannot parse the reply
and the row fails as a judge failure, so the offline run never reaches the verifier's own logic. The
``format`` policy answers such a request with ``instance(schema)``: a deterministic value built from the
schema alone (the first enum member, the first branch of ``anyOf``, every property of an object, the
lower bounds of numbers and lengths). It carries no judgement; it only honours the requested shape.

Only the keywords a strict (OpenAI structured-output) schema uses are read: ``$ref`` into ``$defs`` /
``definitions``, ``enum``, ``const``, ``anyOf`` / ``oneOf`` / ``allOf``, ``type`` (also a list of types),
``properties``, ``items``, ``minItems``, ``minLength``, ``minimum`` / ``exclusiveMinimum``.
"""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 32  # a recursive schema ($ref to itself) ends in null or an empty container here


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    low = schema.get("minimum")
    if isinstance(low, (int, float)) and not isinstance(low, bool):
        return int(low) if integer and float(low).is_integer() else low
    low = schema.get("exclusiveMinimum")
    if isinstance(low, (int, float)) and not isinstance(low, bool):
        return int(low) + 1 if integer else low + 1
    high = schema.get("maximum")
    if isinstance(high, (int, float)) and not isinstance(high, bool) and high < 0:
        return int(high) if integer else high
    return 0


def _of_type(kind: str, schema: dict[str, Any], root: dict[str, Any], depth: int) -> Any:
    if kind == "object":
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        return {name: _instance(sub, root, depth + 1) for name, sub in props.items()}
    if kind == "array":
        count = schema.get("minItems")
        count = count if isinstance(count, int) else 0
        return [_instance(schema.get("items", {}), root, depth + 1) for _ in range(count)]
    if kind == "string":
        length = schema.get("minLength")
        text = "scripted"
        return text + "x" * max(0, (length if isinstance(length, int) else 0) - len(text))
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return False
    return None


def _instance(schema: Any, root: dict[str, Any], depth: int) -> Any:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            return _instance(branches[0], root, depth + 1)
    parts = schema.get("allOf")
    if isinstance(parts, list) and parts:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in parts:
            part = _resolve(part, root)
            if isinstance(part, dict):
                merged.setdefault("properties", {}).update(part.get("properties") or {})
                merged.update({k: v for k, v in part.items() if k != "properties"})
        return _instance(merged, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else ("array" if "items" in schema else None)
    return _of_type(kind, schema, root, depth) if isinstance(kind, str) else None


def instance(schema: Any) -> Any:
    """A value ``schema`` accepts (for the schema keywords read above); deterministic for one schema."""
    return _instance(schema, schema if isinstance(schema, dict) else {}, 0)


def requested_schema(request: dict[str, Any]) -> tuple[bool, Any]:
    """(whether the chat request asks for JSON, the schema it names or None) from ``response_format``."""
    fmt = request.get("response_format")
    if not isinstance(fmt, dict):
        return False, None
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        return True, spec.get("schema") if isinstance(spec, dict) else None
    return fmt.get("type") == "json_object", None
