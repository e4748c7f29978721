"""The scripted ``format`` policy: a fixed reply that honours a requested JSON shape.

A verifier that asks its judge for structured output (``response_format: json_schema``) must get a value it
can parse, or an offline run never reaches the verifier's logic. Every value below is checked with a real
JSON Schema validator (jsonschema), never against a hand-written expected value.
"""

from __future__ import annotations

import asyncio
from typing import Any

import jsonschema
import orjson
import pytest

from palaestra.models.schema_instance import instance, requested_schema
from palaestra.models.scripted import ScriptedBackend

SCHEMAS: dict[str, dict[str, Any]] = {
    "enum and nullable anyOf, strict object": {
        "type": "object", "additionalProperties": False, "required": ["choice", "why", "label"],
        "properties": {"choice": {"anyOf": [{"type": "string", "enum": ["uncertain", "a", "b"]}, {"type": "null"}]},
                       "why": {"type": "string", "minLength": 20},
                       "label": {"enum": ["correct", "incorrect"]}}},
    "$ref into $defs, nested array with minItems": {
        "$defs": {"Item": {"type": "object", "required": ["score", "ok"],
                           "properties": {"score": {"type": "integer", "minimum": 3, "maximum": 9},
                                          "ok": {"type": "boolean"}}}},
        "type": "object", "required": ["items"],
        "properties": {"items": {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/Item"}}}},
    "const, exclusive minimum, type list": {
        "type": "object", "required": ["v", "x", "t"],
        "properties": {"v": {"const": "1.0"}, "x": {"type": "number", "exclusiveMinimum": 0.5},
                       "t": {"type": ["null", "string"]}}},
    "allOf merges properties": {
        "allOf": [{"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}},
                  {"required": ["b"], "properties": {"b": {"type": "integer", "minimum": 1}}}]},
}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_instance_validates_against_its_schema(name: str) -> None:
    schema = SCHEMAS[name]
    value = instance(schema)
    jsonschema.validate(value, schema)  # raises where the instance breaks the schema
    assert instance(schema) == value  # deterministic: the same schema, the same reply


def test_a_recursive_schema_ends() -> None:
    schema = {"$defs": {"Node": {"type": "object", "properties": {"child": {"anyOf": [{"$ref": "#/$defs/Node"},
                                                                                     {"type": "null"}]}}}},
              "$ref": "#/$defs/Node"}
    value = instance(schema)
    depth = 0
    while isinstance(value, dict) and value.get("child") is not None:
        value, depth = value["child"], depth + 1
    assert depth <= 40


def _ask(backend: ScriptedBackend, request: dict[str, Any]) -> str:
    reply = asyncio.run(backend.chat({"messages": [{"role": "user", "content": "judge this"}], **request}))
    return str(reply["choices"][0]["message"]["content"])


def test_the_format_policy_answers_the_requested_schema_and_else_its_text() -> None:
    backend = ScriptedBackend("format", constant_text="[[A]]")
    schema = SCHEMAS["enum and nullable anyOf, strict object"]
    wanted = {"type": "json_schema", "json_schema": {"name": "check", "strict": True, "schema": schema}}
    structured = _ask(backend, {"response_format": wanted})
    jsonschema.validate(orjson.loads(structured), schema)
    assert orjson.loads(_ask(backend, {"response_format": {"type": "json_object"}})) == {}
    assert _ask(backend, {}) == "[[A]]"  # no format asked: the constant text, as scripted:constant answers
    assert requested_schema({"response_format": {"type": "text"}}) == (False, None)
