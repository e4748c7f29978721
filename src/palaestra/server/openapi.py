"""The environment server's OpenAPI document: the wire contract of DESIGN §1, for clients in other
languages and for schema-driven fuzzing (schemathesis). Served at ``GET /openapi.json``."""

from __future__ import annotations

import functools
from typing import Any

from pydantic.json_schema import models_json_schema

from palaestra.wire.env import MODELS

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["kind", "message"],
    "properties": {"kind": {"type": "string"}, "message": {"type": "string"}, "hint": {"type": "string"}}}}}
_MESSAGE = {"type": "object", "required": ["role"], "properties": {"role": {"type": "string"}}}
_TASK = {
    "type": "object", "required": ["id"],
    "properties": {
        "id": {"type": "string"}, "env": {"type": "string"}, "agent": {"type": ["string", "null"]},
        "model": {"type": ["string", "null"]},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": _MESSAGE}]},
        "tools": {"type": ["array", "null"], "items": {"type": "object"}},
        "metadata": {"type": "object"}, "tags": {"type": "array", "items": {"type": "string"}},
    },
}
_TRAJECTORY = {
    "type": "object",
    "properties": {
        "messages": {"type": "array", "items": {"type": "object"}},
        "tool_calls": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                   "properties": {"name": {"type": "string"}}}},
        "final_answer": {"type": ["string", "null"]},
    },
}
_VERDICT = {"type": "object", "required": ["reward"], "properties": {
    "reward": {"type": "number"}, "passed": {"type": ["boolean", "null"]},
    "components": {"type": "object", "additionalProperties": {"type": "number"}}, "metadata": {"type": "object"},
    "answer": {"type": ["string", "null"]}}}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _responses(ok: dict[str, Any], *errors: int) -> dict[str, Any]:
    out: dict[str, Any] = {"200": {"description": "OK", **_json(ok)}}
    for code in errors:
        out[str(code)] = {"description": "error", **_json(_ERROR)}
    return out


_SID = {"name": "sid", "in": "path", "required": True, "schema": {"type": "string"}}


@functools.lru_cache(maxsize=1)
def components() -> dict[str, Any]:
    """Every request and response body of the environment role, as JSON Schemas generated from the wire
    models (``wire/env.py``): what a client in another language builds its types from."""
    _, schema = models_json_schema([(m, "validation") for m in MODELS.values()],
                                   ref_template="#/components/schemas/{model}")
    return dict(schema.get("$defs", {}))


def openapi_document(env_name: str, version: str) -> dict[str, Any]:
    session = {"type": "object", "required": ["session_id", "tools", "messages"], "properties": {
        "session_id": {"type": "string"}, "tools": {"type": "array", "items": {"type": "object"}},
        "messages": {"type": "array", "items": {"type": "object"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": f"Palaestra environment '{env_name}'", "version": version},
        "components": {"schemas": components()},
        "paths": {
            "/sessions": {"post": {"summary": "Seed a session from a task",
                                   "requestBody": {"required": True, **_json({"type": "object", "required": ["task"],
                                                                              "properties": {"task": _TASK}})},
                                   "responses": _responses(session, 400, 422, 429, 500)}},
            "/sessions/{sid}/tools/{name}": {"post": {
                "summary": "Call a tool with its JSON arguments (no body: a tool without arguments)",
                "parameters": [_SID, {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                "requestBody": {"required": False, **_json({"type": "object"})},
                "responses": _responses({"type": "object", "properties": {"output": {}, "error": {"type": "object"}}},
                                        404, 422)}},
            "/sessions/{sid}/verify": {"post": {
                "summary": "Verify the session's state and trajectory", "parameters": [_SID],
                "requestBody": {"required": False, **_json({"type": "object",
                                                            "properties": {"trajectory": _TRAJECTORY}})},
                "responses": _responses(_VERDICT, 400, 404, 422, 500)}},
            "/sessions/{sid}": {"delete": {"summary": "Close a session", "parameters": [_SID],
                                           "responses": _responses({"type": "object", "properties": {
                                               "closed": {"type": "boolean"}}})}},
            "/verify": {"post": {"summary": "Stateless re-verification: seed, replay the tool calls, verify",
                                 "requestBody": {"required": True, **_json({
                                     "type": "object", "required": ["task"],
                                     "properties": {"task": _TASK, "trajectory": _TRAJECTORY}})},
                                 "responses": _responses(_VERDICT, 400, 422, 500)}},
            "/reference": {"post": {"summary": "The gold actions for a task (for the scripted oracle)",
                                    "requestBody": {"required": True, **_json({
                                        "type": "object", "required": ["task"], "properties": {"task": _TASK}})},
                                    "responses": _responses({"type": ["object", "null"]}, 400, 422, 500)}},
            "/info": {"get": {"summary": "Name, version, tool schemas, verifier hash",
                              "responses": _responses({"type": "object"})}},
            "/healthz": {"get": {"summary": "Liveness and session count", "responses": _responses({"type": "object"})}},
        },
    }
