"""OpenEnv's harness sessions on a Palaestra environment served as an OpenEnv server (``env serve
--openenv``): what TRL's OpenEnv harness rollouts (``harness_session_factory`` of its async GRPO) and
OpenEnv's own ``MCPHarnessAdapter`` drive, with no glue per environment.

A session is OpenEnv's ``ResourceSession`` over OpenEnv's own ``GenericEnvClient``: the reset opens the
episode, its observation gives the initial messages (the task's prompt) and the tools (that task's, plus
``submit_answer``), a tool call is a ``call_tool`` step, and the episode's reward is the verifier's,
forwarded as the environment produced it (OpenEnv's rule: the orchestration layer never makes a reward
up). A rollout that ends with a plain assistant message (no tool call) is graded on that message
as the final answer, as Palaestra's own tool agent does; one that called ``submit_answer`` is already
graded. A failure on the server's side (a broken verifier) raises, so the trainer drops the rollout as
unscorable instead of learning from a 0.

Example (TRL)::

    factory = PalaestraSessionFactory("http://127.0.0.1:8000", token=TOKEN)
    trainer = AsyncGRPOTrainer(..., harness_session_factory=lambda **_: factory,
                               harness_adapter=MCPHarnessAdapter())
"""

from __future__ import annotations

from typing import Any

from palaestra.adapters.openenv_sessions import INSTALL_HINT
from palaestra.core.errors import ConfigError
from palaestra.core.records import last_assistant_text

__all__ = ["PalaestraSession", "PalaestraSessionFactory"]


try:  # OpenEnv's ABCs when it is installed; the module imports without it
    from openenv.core.harness import ResourceSession as _Session
    from openenv.core.harness import ResourceSessionFactory as _Factory
except ImportError:  # pragma: no cover - the [openenv] extra is missing
    _Session = _Factory = object  # type: ignore[assignment,misc,unused-ignore]


class PalaestraSession(_Session):  # type: ignore[misc,valid-type,unused-ignore]
    """One rollout's episode on the served environment, through a sync OpenEnv client it owns."""

    def __init__(self, client: Any, reset_kwargs: dict[str, Any]) -> None:
        from openenv.core.env_server.mcp_types import Tool

        self.client = client
        self.last: Any = None
        try:
            self.first = client.reset(**reset_kwargs)
        except BaseException:
            client.close()
            raise
        self.tools = [Tool(name=t["name"], description=t.get("description") or "", input_schema=t["input_schema"])
                      for t in self.first.observation["tools"]]

    def initial_messages(self) -> list[dict[str, Any]]:
        return list(self.first.observation["messages"])

    def list_tools(self) -> list[Any]:
        return list(self.tools)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """One ``call_tool`` step. The model's mistakes come back as a ToolResult error for it to read;
        ``submit_answer`` ends the episode with the verdict's reward."""
        from openenv.core.harness import ToolResult

        self.last = result = self.client.step({"type": "call_tool", "tool_name": name, "arguments": arguments})
        obs = result.observation or {}
        if result.done:
            return ToolResult(data={"reward": result.reward, "verdict": obs.get("verdict")}, done=True,
                              metadata={"reward": result.reward})
        error = obs.get("error")
        if error:
            return ToolResult(data=f"Error ({error.get('error_type')}): {error.get('message')}",
                              error=str(error.get("message")))
        return ToolResult(data=(obs.get("result") or {}).get("data"))

    def verify(self, transcript: list[dict[str, Any]], final_state: Any | None = None) -> Any:
        """The environment's reward: the ``submit_answer`` step's, else the last assistant message graded
        as the final answer. A broken verifier raises (an error frame), so the rollout is unscorable."""
        from openenv.core.harness import VerifyResult

        if self.last is None or not self.last.done:
            self.last = self.client.step({"answer": last_assistant_text(transcript)})
        verdict = (self.last.observation or {}).get("verdict") or {}
        return VerifyResult(env_reward=self.last.reward, done=True, metrics={"passed": bool(verdict.get("passed"))},
                            artifacts={"verdict": verdict})

    def close(self) -> None:
        self.client.close()


class PalaestraSessionFactory(_Factory):  # type: ignore[misc,valid-type,unused-ignore]
    """Creates one :class:`PalaestraSession` per rollout on the served environment.

    ``create(task, seed, episode_id)``: ``task`` (what the trainer's dataset row holds) is a task id (a
    string), a dict with ``task_id`` (or ``index``, or a whole ``task`` row), or anything else (a list of
    messages, say), in which case ``seed`` picks the task (``seed mod n``: a GRPO group shares its seed,
    so it shares its task). The prompt the model sees is always the environment's, from the reset."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 60.0) -> None:
        if _Factory is object:
            raise ConfigError("OpenEnv is not installed", hint=INSTALL_HINT)
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s

    def reset_kwargs(self, task: Any) -> dict[str, Any]:
        """A string is a task id, always (a dataset of task ids; never a guess from prompt text)."""
        if isinstance(task, str):
            return {"task_id": task}
        if isinstance(task, dict):
            return {k: task[k] for k in ("task_id", "index", "task") if k in task}
        return {}

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> PalaestraSession:
        from openenv.core.generic_client import GenericEnvClient

        kwargs = self.reset_kwargs(task)
        if seed is not None:
            kwargs.setdefault("seed", seed)
        if episode_id is not None:
            kwargs["episode_id"] = episode_id
        client = GenericEnvClient(base_url=self.url, headers=self.headers or None,
                                  message_timeout_s=self.timeout_s).sync()
        return PalaestraSession(client, kwargs)
