"""A small valid instance of a JSON Schema, for the oracle of rows that carry a schema but no answer.

Rows such as NeMo Gym's structured-output tasks state only the schema; ``env check`` and the oracle still
need an answer that passes. This builds the smallest plausible one (required properties only, minimum
lengths and bounds, the first enum value or ``anyOf`` branch) and the caller keeps it only when the real
validator accepts it, so a schema this cannot satisfy yields no reference rather than a wrong one.
"""

from __future__ import annotations

from typing import Any

_FORMATS = {"date": "2024-01-01", "date-time": "2024-01-01T00:00:00Z", "time": "00:00:00",
            "email": "a@example.com", "uri": "https://example.com", "uuid": "00000000-0000-0000-0000-000000000000",
            "ipv4": "127.0.0.1"}
_MAX_DEPTH = 32


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else schema


def _value(schema: Any, root: dict[str, Any], depth: int) -> Any:
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return None
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _value(schema[key][0], root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            if isinstance(part, dict):
                part = _resolve(part, root)
                merged.update({k: v for k, v in part.items() if k not in ("properties", "required")})
                merged.setdefault("properties", {}).update(part.get("properties") or {})
                merged.setdefault("required", []).extend(part.get("required") or [])
        return _value(merged, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: _value(props.get(name, {}), root, depth + 1) for name in schema.get("required") or []}
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [_value(schema.get("items") or {}, root, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        value = low + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else low
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    text = _FORMATS.get(str(schema.get("format")), "x")
    return text * max(1, int(schema.get("minLength") or 1)) if text == "x" else text


def minimal_instance(schema: dict[str, Any]) -> Any:
    """A small instance built from ``schema`` (validate it before use: this does not guarantee validity)."""
    return _value(schema, schema, 0)
