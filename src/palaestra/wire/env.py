"""Wire shapes of the environment role (DESIGN §1): every request and response body of its HTTP surface,
as pydantic models shared by the server, every client transport and the OpenAPI document
(``server/openapi.py`` builds its schemas from these classes, so the document cannot drift from the code).

``ToolResult`` and ``SessionHandle`` are also what the in-process transports hand back, so one shape
travels however the environment is placed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from palaestra.core.records import KeptDict, Messages, Task, Trajectory, Verdict
from palaestra.wire.errors import ErrorDetail, ErrorEnvelope


class _Open(BaseModel):
    """Servers may add fields (DESIGN §1): clients keep what they do not know instead of refusing it."""

    model_config = ConfigDict(extra="allow")


class OpenSessionRequest(BaseModel):
    """``POST /sessions``: seed a session from a task."""

    task: Task


class SessionHandle(_Open):
    """What ``POST /sessions`` answers: the session id, the tools the model may call, the first messages."""

    session_id: str
    tools: list[KeptDict] = Field(default_factory=list)
    messages: Messages = Field(default_factory=list)
    observation: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SessionHandle:
        return cls(session_id=d["session_id"], tools=list(d.get("tools") or []),
                   messages=list(d.get("messages") or []), observation=d.get("observation"))

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "tools": self.tools, "messages": self.messages,
                "observation": self.observation}


class ToolResult(BaseModel):
    """``POST /sessions/{id}/tools/{name}`` answers this (the body is the tool's JSON arguments): an output,
    or an error the model can read and recover from."""

    output: Any = None
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"output": self.output}
        if self.error is not None:
            out["error"] = self.error
        return out


class VerifyRequest(BaseModel):
    """``POST /sessions/{id}/verify``: the trajectory to grade (absent: an empty one). Answers a Verdict."""

    trajectory: Trajectory = Field(default_factory=Trajectory)


class StatelessVerifyRequest(BaseModel):
    """``POST /verify``: seed a fresh state from the task, replay the trajectory's tool calls, verify."""

    task: Task
    trajectory: Trajectory = Field(default_factory=Trajectory)


class ReferenceRequest(BaseModel):
    """``POST /reference``: the gold actions for a task (answer: a Reference, or null)."""

    task: Task


class CloseAnswer(BaseModel):
    """``DELETE /sessions/{id}``: whether a session was closed (false: it was already gone)."""

    closed: bool


class EnvInfo(_Open):
    """``GET /info``: name, version, tool schemas, verifier hash (and whatever else the environment adds)."""

    name: str
    version: str = ""


class Health(_Open):
    """``GET /healthz``: liveness and session counts."""

    status: str
    env: str = ""
    sessions: int = 0
    closed: int = 0


# Every body of the environment role, by name: exported as OpenAPI components (server/openapi.py).
MODELS: dict[str, type[BaseModel]] = {
    "OpenSessionRequest": OpenSessionRequest, "SessionHandle": SessionHandle, "ToolResult": ToolResult,
    "VerifyRequest": VerifyRequest, "Verdict": Verdict, "StatelessVerifyRequest": StatelessVerifyRequest,
    "ReferenceRequest": ReferenceRequest, "CloseAnswer": CloseAnswer, "EnvInfo": EnvInfo, "Health": Health,
    "ErrorEnvelope": ErrorEnvelope, "ErrorDetail": ErrorDetail,
}
