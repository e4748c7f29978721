"""``@tool``: a method becomes a model-callable tool whose JSON schema comes from its type hints and
docstring, and whose arguments are validated by pydantic before the method ever runs."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from palaestra.core.errors import BadArguments

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_ATTR = "__palaestra_tool__"


def tool(fn: F | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Mark an Environment method as a tool: ``async def add(self, state, x: int) -> str``.

    Usable bare (``@tool``) or with overrides (``@tool(name="search")``).
    """

    def mark(f: F) -> F:
        setattr(f, _TOOL_ATTR, {"name": name or f.__name__, "description": description})
        return f

    return mark(fn) if fn is not None else mark


def is_tool(obj: Any) -> bool:
    return callable(obj) and hasattr(obj, _TOOL_ATTR)


_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into the summary and per-argument descriptions."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:", "params:"):
            section, current = "args", None
            continue
        if stripped.lower() in ("returns:", "return:", "raises:", "yields:", "example:", "examples:"):
            section, current = "other", None
            continue
        if section == "summary":
            summary.append(line)
        elif section == "args":
            m = _ARG_LINE.match(line)
            if m and (len(line) - len(line.lstrip())) <= 4:
                current = m.group(1).lstrip("*")
                args[current] = m.group(3).strip()
            elif current and stripped:
                args[current] = (args[current] + " " + stripped).strip()
    text = "\n".join(summary).strip()
    return text, args


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class ToolSpec:
    """A bound tool: its OpenAI function schema, the pydantic model validating its arguments, the method."""

    name: str
    description: str
    args_model: type[BaseModel]
    method_name: str
    is_async: bool

    def schema(self) -> dict[str, Any]:
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            if isinstance(prop, dict):
                prop.pop("title", None)
        params.setdefault("properties", {})
        params["additionalProperties"] = False
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check arguments against the schema; the error names each bad field so a model can fix it."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise BadArguments(
                f"tool '{self.name}' takes a JSON object of arguments, got {type(arguments).__name__}",
                hint=f"send an object with the fields {sorted(self.args_model.model_fields)}",
            )
        try:
            parsed = self.args_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in exc.errors()
            )
            raise BadArguments(
                f"invalid arguments for tool '{self.name}': {problems}",
                hint="fix the fields named above and call the tool again",
            ) from None
        return {k: getattr(parsed, k) for k in self.args_model.model_fields}


def build_tool_spec(cls: type, attr: str, fn: Callable[..., Any]) -> ToolSpec:
    """Build the spec of one ``@tool`` method: parameters after ``self`` and ``state`` become fields."""
    meta = getattr(fn, _TOOL_ATTR)
    summary, arg_docs = parse_docstring(fn.__doc__)
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolved forward refs: fall back to raw annotations
        hints = {k: p.annotation for k, p in sig.parameters.items()}
    params = list(sig.parameters.values())
    if len(params) < 2 or params[0].name != "self":
        raise TypeError(f"@tool {cls.__name__}.{attr} must be a method taking (self, state, ...)")
    fields: dict[str, Any] = {}
    from pydantic import Field

    for p in params[2:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"@tool {cls.__name__}.{attr}: *args/**kwargs are not allowed in tools")
        ann = hints.get(p.name, Any)
        if ann is inspect.Parameter.empty:
            ann = Any
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[p.name] = (ann, Field(default, description=arg_docs.get(p.name) or None))
    model = create_model(f"{cls.__name__}_{meta['name']}_args", __base__=_ArgsBase, **fields)
    return ToolSpec(
        name=meta["name"],
        description=meta["description"] or summary or meta["name"],
        args_model=model,
        method_name=attr,
        is_async=inspect.iscoroutinefunction(fn),
    )
