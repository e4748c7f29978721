"""Wire shapes of the environment protocol, shared by the server and every client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolResult:
    """A tool's answer as the model will see it: an output, or an error it can read and recover from."""

    output: Any = None
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"output": self.output}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class SessionHandle:
    """What ``POST /sessions`` answers: the session id, the tools the model may call, the first messages."""

    session_id: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    observation: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SessionHandle:
        return cls(
            session_id=d["session_id"],
            tools=list(d.get("tools") or []),
            messages=list(d.get("messages") or []),
            observation=d.get("observation"),
        )
