"""The records every part of Palaestra exchanges: tasks, references, verdicts, trajectories, rollouts.

One schema module shared by clients and servers, so a field means the same thing everywhere. Chat
messages stay plain OpenAI-style dicts: every backend and harness already speaks that shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, field_validator

# 2: journal records may be compact (a task's input and repeated request messages stored by reference;
# see rollout/compact.py, whose expand_record every reader applies). Records of version 1 are always whole.
SCHEMA_VERSION = 2

Message = dict[str, Any]
# How record fields hold free-form JSON objects (messages, tool schemas, a model call's bodies): checked to
# be a dict and kept as it is, not copied key by key (a copy of every message per record was most of a
# trajectory's validation, and a resent message could no longer be told by identity when a record is
# compacted). JSON schema and JSON input are those of ``dict[str, Any]``.
KeptDict = InstanceOf[dict[str, Any]]
Messages = list[KeptDict]


class Record(BaseModel):
    """Base for records: unknown fields are kept, so newer writers never lose data on older readers."""

    model_config = ConfigDict(extra="allow")


class Task(Record):
    """One JSONL row. ``metadata`` is verifier-only ground truth and is never shown to the model."""

    id: str
    env: str = ""
    agent: str | None = None
    model: str | None = None
    input: str | Messages = ""
    tools: list[dict[str, Any]] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)

    @field_validator("input")
    @classmethod
    def _roles(cls, value: str | list[Message]) -> str | list[Message]:
        """Every input message names its role (a string): a chat template cannot place it otherwise."""
        if isinstance(value, list):
            for i, m in enumerate(value):
                if not isinstance(m.get("role"), str):
                    raise ValueError(f"input[{i}] needs a string 'role' (system, user, assistant or tool)")
        return value

    def messages(self) -> list[Message]:
        """The task input as chat messages (a prompt string becomes one user message)."""
        if isinstance(self.input, str):
            return [{"role": "user", "content": self.input}]
        return [dict(m) for m in self.input]


class ToolCall(Record):
    """A tool call as the model asked for it (arguments already decoded from JSON)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class Reference(Record):
    """What a perfect agent would do: tool calls in order (one per turn) and the final answer.

    ``parallel``: the calls are made together in one turn, for verifiers that read one turn's calls
    (e.g. a verifiers tool environment with ``max_turns=1``)."""

    tool_calls: list[ToolCall] = Field(default_factory=list)
    final_answer: str | None = None
    parallel: bool = False


class Verdict(Record):
    """The verifier's judgement. ``answer`` is the extracted answer (used for majority@k)."""

    reward: float
    passed: bool | None = None
    components: dict[str, float] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    answer: str | None = None

    def is_pass(self) -> bool:
        return self.passed if self.passed is not None else self.reward >= 1.0


class ToolCallRecord(Record):
    """One tool call as it ran: arguments, output, whether it errored and how long it took."""

    name: str
    arguments: Any = None
    call_id: str | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    status: Literal["ok", "error"] = "ok"
    started: float = 0.0
    duration_s: float = 0.0


class ModelCallRecord(Record):
    """One model call as captured by the model proxy (token ids and logprobs when the backend gives them)."""

    api: str = "chat"
    request: KeptDict = Field(default_factory=dict)  # the bodies as the proxy sent and received them
    response: KeptDict | None = None
    error: dict[str, Any] | None = None
    status: int | None = None
    started: float = 0.0
    latency_s: float = 0.0
    usage: dict[str, int] = Field(default_factory=dict)
    prompt_token_ids: list[int] | None = None
    generation_token_ids: list[int] | None = None
    generation_logprobs: list[float] | None = None
    # What the backend gave for RL: "ids+logprobs", "ids", "logprobs" or "none" (said plainly, not guessed).
    token_capture: str | None = None
    routed_to: str | None = None  # the named model that answered, when a router chose


def last_assistant_text(messages: list[dict[str, Any]]) -> str:
    """The last assistant message's text (content parts joined): what a transcript ends on."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


class Trajectory(Record):
    """Everything that happened in a rollout, in order."""

    messages: Messages = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    model_calls: list[ModelCallRecord] = Field(default_factory=list)
    final_answer: str | None = None
    steps: int = 0
    stop_reason: str | None = None
    parse_failures: int = 0

    def final_text(self) -> str:
        """The model's last words: ``final_answer``, else the last assistant message's text."""
        if self.final_answer is not None:
            return self.final_answer
        return last_assistant_text(self.messages)


OutcomeStatus = Literal["scored", "failed", "timed_out"]


class Outcome(Record):
    """``scored`` or an infrastructure failure with its ``kind`` (model, environment, sandbox, agent,
    verifier, judge). A failure is never a reward of 0: it is excluded from scores and retried.

    Frozen: an outcome is replaced, never edited, so every scored rollout can share one."""

    model_config = ConfigDict(extra="allow", frozen=True)

    status: OutcomeStatus
    kind: str | None = None
    message: str | None = None

    @classmethod
    def scored(cls) -> Outcome:
        if cls is Outcome:
            return _SCORED
        return cls(status="scored")

    @classmethod
    def failed(cls, kind: str, message: str) -> Outcome:
        return cls(status="failed", kind=kind, message=message)


_SCORED = Outcome(status="scored")


class Usage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0

    def add(self, usage: dict[str, Any]) -> None:
        prompt, completion = _tokens(usage)
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    @classmethod
    def total(cls, usages: list[dict[str, Any]], *, tool_calls: int = 0) -> Usage:
        """The usage of a rollout whose model calls reported ``usages``: made once, not added to per call."""
        prompt = completion = 0
        for usage in usages:
            p, c = _tokens(usage)
            prompt += p
            completion += c
        return cls(prompt_tokens=prompt, completion_tokens=completion, model_calls=len(usages), tool_calls=tool_calls)


def _tokens(usage: dict[str, Any]) -> tuple[int, int]:
    """A call's prompt and completion tokens, in either dialect's names."""
    return (int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0),
            int(usage.get("completion_tokens") or usage.get("output_tokens") or 0))


class Rollout(Record):
    """One attempt at one (task, repeat): the journal's unit."""

    schema_version: int = SCHEMA_VERSION
    rollout_id: str
    task_id: str
    env: str
    agent: str
    model: str
    repeat: int = 0
    attempt: int = 0
    outcome: Outcome
    verdict: Verdict | None = None
    trajectory: Trajectory = Field(default_factory=Trajectory)
    usage: Usage = Field(default_factory=Usage)
    timings: dict[str, float] = Field(default_factory=dict)
    started_at: float = 0.0
    tags: list[str] = Field(default_factory=list)

    @property
    def reward(self) -> float | None:
        return self.verdict.reward if (self.verdict is not None and self.outcome.status == "scored") else None
