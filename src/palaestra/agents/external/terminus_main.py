"""One task with Harbor's Terminus-2, as a program: what ``Terminus2Adapter`` runs.

Executed by the Python of the Terminus-2 virtual environment (Python 3.12, ``harbor`` from PyPI), never
imported by Palaestra: it imports nothing of Palaestra and only Harbor's public classes. Terminus-2 runs
unmodified: ``Terminus2(...).setup(env)`` starts its tmux session, ``run(instruction, env, context)`` is its
loop (keystrokes into tmux, the pane read back, until it confirms ``task_complete``), and its LLM is
Harbor's own LiteLLM client, pointed at the rollout's OpenAI-compatible endpoint.

Harbor hands an agent a ``BaseEnvironment`` (a container: ``exec``, ``upload_*``, ``download_*``). Here that
environment is ``WorkdirEnvironment``: the working directory Palaestra seeded with the task's files, inside
the jail the runner starts every external CLI in (own network and PID namespaces, the model endpoint the
only way out). ``exec`` runs ``bash -c`` there, so tmux, its server and what the agent types all live and
die in that jail; the runner hands the changed files back to the task's environment before it is graded.
The environment has no separate users (``user=`` is ignored: everything runs as the jail's one user) and no
``/logs`` mount, so Terminus-2's pane log (``pipe-pane`` to ``/logs/agent``) is not kept; its trajectory
(ATIF ``trajectory.json``) is written to ``--logs-dir``, and the last agent message to ``--final-file``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities


class WorkdirEnvironment(BaseEnvironment):
    """Harbor's environment interface over a local working directory (the jailed, seeded workdir)."""

    def __init__(self, workdir: Path, trial_dir: Path) -> None:
        from harbor.models.task.config import EnvironmentConfig
        from harbor.models.trial.paths import TrialPaths

        self.workdir = workdir
        paths = TrialPaths(trial_dir=trial_dir)
        paths.mkdir()
        super().__init__(
            environment_dir=workdir,
            environment_name="palaestra",
            session_id="palaestra__env",
            trial_paths=paths,
            task_env_config=EnvironmentConfig(),
        )

    @staticmethod
    def type() -> str:
        return "palaestra-workdir"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities()

    def _validate_definition(self) -> None:
        return None  # no Dockerfile: the workdir is the environment

    async def start(self, force_build: bool) -> None:
        return None

    async def stop(self, delete: bool) -> None:
        return None

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """``bash -c COMMAND`` in the workdir; on timeout its whole process group is killed (what it left
        in tmux's server, a process group of its own, stays, as in a container)."""
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=cwd or str(self.workdir),
            env={**os.environ, **(env or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_sec)
        except asyncio.TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = await proc.communicate()
            return ExecResult(
                stdout=out.decode(errors="replace"),
                stderr=err.decode(errors="replace") + f"\ntimed out after {timeout_sec} s",
                return_code=124,
            )
        return ExecResult(
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            return_code=proc.returncode if proc.returncode is not None else -1,
        )

    def _local(self, path: str | Path) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.workdir / p

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        target = self._local(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_path, target)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        shutil.copytree(source_dir, self._local(target_dir), dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self._local(source_path), target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        shutil.copytree(self._local(source_dir), target_dir, dirs_exist_ok=True)


def last_agent_message(logs_dir: Path) -> str:
    """The last agent step's message of Terminus-2's ATIF trajectory (its analysis and plan)."""
    try:
        steps = json.loads((logs_dir / "trajectory.json").read_text(encoding="utf-8")).get("steps", [])
    except (OSError, ValueError, AttributeError):
        return ""
    messages = [s.get("message") for s in steps if isinstance(s, dict) and s.get("source") == "agent"]
    texts = [m for m in messages if isinstance(m, str) and m.strip()]
    return texts[-1] if texts else ""


async def run(args: argparse.Namespace) -> int:
    from harbor.agents.terminus_2 import Terminus2
    from harbor.models.agent.context import AgentContext

    logs_dir = Path(args.logs_dir)
    env = WorkdirEnvironment(Path.cwd(), logs_dir / "trial")
    model_info: dict[str, Any] = {
        "max_input_tokens": args.context_tokens,
        "max_output_tokens": args.output_tokens,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
    }
    agent = Terminus2(
        logs_dir=logs_dir,
        model_name=f"openai/{args.model}",
        api_base=args.base_url,
        max_turns=args.max_turns,
        suppress_max_turns_warning=True,
        record_terminal_session=False,
        model_info=model_info,
        llm_kwargs={"api_key": args.api_key},
    )
    await agent.setup(env)
    context = AgentContext()
    try:
        await agent.run(args.prompt, env, context)
    finally:
        await env.exec("tmux kill-server", timeout_sec=10)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True, help="the OpenAI-compatible endpoint, with /v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="palaestra-no-key")
    parser.add_argument("--max-turns", type=int, default=16)
    parser.add_argument("--context-tokens", type=int, default=32768, help="the context window litellm is told")
    parser.add_argument("--output-tokens", type=int, default=4096)
    parser.add_argument("--logs-dir", required=True)
    parser.add_argument("--final-file", required=True)
    parser.add_argument("prompt")
    args = parser.parse_args()
    Path(args.logs_dir).mkdir(parents=True, exist_ok=True)
    try:
        return asyncio.run(run(args))
    finally:
        Path(args.final_file).write_text(last_agent_message(Path(args.logs_dir)), encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
