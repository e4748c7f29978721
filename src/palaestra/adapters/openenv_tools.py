"""OpenEnv MCP tools as Palaestra tools: their parameters, and what a ``call_tool`` step answers.

An OpenEnv MCP environment (RFC 003) answers a ``call_tool`` action with a ``CallToolObservation``:
``result`` is the MCP ``CallToolResult`` (in-process an object, over the wire its JSON), ``error`` a
framework error (unknown tool, bad arguments, timeout). The model should read what the tool returned,
not the envelope, and an error should come back as the typed tool error Palaestra gives for any tool.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from palaestra.adapters.openenv_sessions import StepOutcome
from palaestra.core.errors import BadArguments, ToolError, UnknownTool

REWARD_MODES = ("final", "sum", "max")


def mcp_parameters(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool's MCP input schema as Palaestra tool parameters: an object, and fields it does not declare
    are refused (an MCP server would otherwise drop or reject them after the step was spent)."""
    schema = copy.deepcopy(tool.get("input_schema") or {})
    schema.pop("title", None)
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema.setdefault("additionalProperties", False)
    return schema


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _texts(content: Any) -> str | None:
    if not isinstance(content, list):
        return None
    texts = [str(c["text"]) for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
    return "\n".join(texts) if texts else None


def mcp_result(outcome: StepOutcome) -> Any:
    """What the tool returned: its structured value when it has one, else its text content. A framework
    error or an MCP error result is raised as the matching tool error, for the model to read."""
    obs = outcome.observation
    error = _plain(obs.get("error"))
    if isinstance(error, dict) and error:
        kind, message = str(error.get("error_type", "")), str(error.get("message", "the tool call failed"))
        if kind == "tool_not_found":
            raise UnknownTool(message)
        if kind == "invalid_args":
            raise BadArguments(message, hint="fix the arguments named in the message")
        raise ToolError(message)
    result = _plain(obs.get("result"))
    if not isinstance(result, dict):
        return result
    if result.get("is_error") or result.get("isError"):
        raise ToolError(_texts(result.get("content")) or "the tool reported an error")
    structured = result.get("structured_content", result.get("structuredContent"))
    if result.get("data") is not None:
        return result["data"]
    if isinstance(structured, dict) and set(structured) == {"result"}:
        return structured["result"]
    if structured is not None:
        return structured
    text = _texts(result.get("content"))
    return text if text is not None else result
