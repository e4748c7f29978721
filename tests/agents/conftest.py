"""Shared pieces for the harness tests: the files environment, the scripted model behind a real proxy,
and skips for machines without the jail (network namespaces) or without a CLI installed: both are
decided before anything runs, so a rollout that fails (a sandbox, the jail, the CLI) is a test failure."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.external import ExternalCLIAgent
from palaestra.agents.external.adapter import CLIAdapter
from palaestra.agents.external.netns import isolation_problem
from palaestra.core.records import Rollout, Task
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

FILES_ENV = f"{Path(__file__).parent / 'files_env.py'}:FilesEnv"

# The task every CLI test runs: read a seeded file, write a new one from it, delete another.
SHELL_STEP = "cat notes.txt > made.txt && echo hi >> made.txt && rm old.txt && echo did-it"
FILES_TASK = Task(
    id="cli-files", env="files", input="Create made.txt from notes.txt plus a line 'hi', and delete old.txt.",
    metadata={"files": {"notes.txt": "seeded\n", "old.txt": "stale\n"},
              "expect": {"made.txt": "seeded\nhi\n", "notes.txt": "seeded\n"}, "absent": ["old.txt"]},
)


def require_jail() -> None:
    problem = isolation_problem()
    if problem is not None:
        pytest.skip(f"netns: external CLIs need a network namespace here: {problem}")


def require_cli(adapter: CLIAdapter) -> None:
    require_jail()
    if not adapter.available():
        pytest.skip(f"agents: {adapter.package} is not installed (bash .ci/setup-agents.sh installs it)")


@pytest.fixture
async def files_env() -> AsyncIterator[Any]:
    mounted = await mount_env(FILES_ENV, "inprocess")
    yield mounted.client
    await mounted.stop()


@pytest.fixture
async def terminal() -> AsyncIterator[Any]:
    """Palaestra's terminal environment, in process: the task set the CLI harnesses are tried on."""
    mounted = await mount_env("terminal", "inprocess")
    yield mounted.client
    await mounted.stop()


class CountingScripted(ScriptedBackend):
    """The scripted model, counting the calls that reached it: what the proxy served, to compare with
    the model calls the trajectory recorded."""

    served = 0

    async def chat(self, request: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
        self.served += 1
        return await super().chat(request, ctx)


async def run_cli(adapter: CLIAdapter, env: Any, replay: list[dict[str, Any]], task: Task = FILES_TASK,
                  backend: ScriptedBackend | None = None, **agent_kw: Any) -> Rollout:
    """One real rollout: the CLI, jailed, against the scripted ``replay`` policy behind a ModelProxy."""
    proxy = ModelProxy(backend or ScriptedBackend("replay", replay=replay))
    agent = ExternalCLIAgent(adapter, **agent_kw)
    return await run_rollout(task, env=env, agent=agent, proxy=proxy, model_name="scripted", deadline_s=120)


async def run_terminal_task(adapter: CLIAdapter, env: Any, replay: list[dict[str, Any]]) -> Rollout:
    """The CLI on ``terminal-make-executable`` against ``replay``, which makes exactly two model calls:
    the rollout must be scored, and every call the model served must be in its trajectory with its
    response (the harness's own count agreeing)."""
    from palaestra.envs.terminal.env import Terminal

    task = next(t for t in Terminal().examples() if t.id == "terminal-make-executable")
    backend = CountingScripted("replay", replay=replay)
    r = await run_cli(adapter, env, replay, task=task, backend=backend)
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    harness = (r.trajectory.model_extra or {})["harness"]
    assert backend.served == len(r.trajectory.model_calls) == harness["model_calls"] == 2, harness
    assert all(c.response is not None for c in r.trajectory.model_calls)
    return r
