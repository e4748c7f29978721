"""What a trainer sends to the rollout service and what it gets back (pydantic at the wire)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from palaestra.core.records import Rollout, Task

StragglerPolicy = Literal["drop", "pad", "wait"]


class PolicyEndpoint(BaseModel):
    """The trainer's own inference server (vLLM, SGLang, ``palaestra model serve``): OpenAI-compatible.

    The API key is never sent in a request: ``api_key_env`` names the variable of the service's
    environment that holds it."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    model: str | None = Field(None, description="Model name sent upstream.")
    api_key_env: str | None = Field(None, description="Variable (of the service) holding the API key.")
    capture_tokens: bool = Field(True, description="Ask for prompt/generation token ids and logprobs (vLLM).")
    continue_tokens: bool = Field(False, description="Send the previous turn's ids (continue_token_ids); only "
                                                     "for backends that understand them.")
    timeout_s: float = Field(120.0, gt=0)
    max_concurrency: int = Field(64, ge=1)


class JobSpec(BaseModel):
    """One submission: every task becomes one group of ``group_size`` rollouts."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[Task] = Field(min_length=1)
    group_size: int = Field(ge=1, le=1024)
    policy: PolicyEndpoint | None = Field(None, description="The trainer's inference server; leave it out "
                                          "when the job is given an in-process backend (Python API).")
    sampling: dict[str, Any] = Field(default_factory=dict, description="Merged into every model request; a "
                                     "'seed' becomes seed + member index so group members differ.")
    agent: str = "tool"
    max_steps: int = Field(16, ge=1)
    placement: str = Field("direct", description="Environment placement: direct | inprocess | local.")
    rollout_deadline_s: float = Field(600.0, gt=0, description="Hard deadline of one rollout.")
    group_deadline_s: float | None = Field(None, gt=0, description="Stragglers of a group still running this "
                                           "long after it started are handled by straggler_policy.")
    straggler_policy: StragglerPolicy = Field("drop", description="drop: cancel them and discard the group; "
                                              "pad: cancel them, deliver the group with timed-out stand-ins; "
                                              "wait: let them finish (up to rollout_deadline_s).")
    max_staleness: int | None = Field(None, ge=0, description="A group sampled at policy version v is not "
                                      "delivered once the trainer's version exceeds v + max_staleness.")
    requeue_stale: bool = Field(True, description="Sample a stale group's task again with the new policy.")
    policy_version: int = Field(0, description="The trainer's policy version at submission.")
    max_groups_in_flight: int = Field(8, ge=1)
    max_buffered_groups: int = Field(16, ge=1, description="Groups finished but not yet taken, plus groups in "
                                     "flight, stay under this: sampling never runs far ahead of training.")

    def model_label(self, backend: object = None) -> str:
        """The model name rollouts record: the endpoint's model (or its redacted URL), else the backend's."""
        if self.policy is not None:
            from palaestra.core.secrets import redact_url

            return self.policy.model or redact_url(self.policy.base_url)
        return str(getattr(backend, "model", None) or getattr(backend, "name", None) or "in-process")


class Group(BaseModel):
    """A finished group, in member order. ``padded`` lists the members that are stand-ins for cancelled
    stragglers (outcome ``timed_out``, kind ``straggler``): they carry no reward and no tokens."""

    job_id: str
    group_id: int
    task_id: str
    env: str
    policy_version: int
    status: Literal["complete", "padded", "late"]
    rollouts: list[Rollout]
    padded: list[int] = Field(default_factory=list)
    started_at: float
    wall_s: float

    def rewards(self) -> list[float | None]:
        return [r.reward for r in self.rollouts]
