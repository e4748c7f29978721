"""The generic external-CLI harness: seed a working directory, start the CLI jailed in its own network
namespace with its base URL pointed at this rollout's model endpoint, wait, hand the changed files to
the environment, and rebuild the trajectory from the model calls the CLI made.

Failures are typed at this boundary: a model error the CLI ran into is ``failed(model)`` (the CLI's
exit code says nothing useful then); a CLI that never reached the model, or a missing executable, is
``failed(agent)``; a CLI that talked to the model and then gave up is a scored rollout like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path
from typing import Any

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.agents.external import netns
from palaestra.agents.external.adapter import CLIAdapter, LaunchContext
from palaestra.agents.external.endpoint import ModelEndpoint
from palaestra.agents.external.transcript import rebuild_messages
from palaestra.agents.external.workdir import ToolBridge, diff, snapshot
from palaestra.core.errors import AgentError
from palaestra.core.records import Message, Task, Trajectory
from palaestra.wire.env import SessionHandle

OUTPUT_TAIL = 8000


def prompt_text(messages: list[Message], include_system: bool = False) -> str:
    """The task as one prompt. The environment's system prompt describes *its* tools, which a CLI does
    not have, so by default only the user's words go in."""
    parts = []
    for m in messages:
        if m.get("role") == "user" or (include_system and m.get("role") == "system"):
            content = m.get("content")
            text = content if isinstance(content, str) else "".join(
                str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            if text.strip():
                parts.append(text.strip())
    return "\n\n".join(parts)


def child_environment(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """A minimal environment: no variable of the parent leaks in (keys, proxies, tokens) except PATH."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home), "USER": "palaestra", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "TERM": "dumb", "NO_COLOR": "1", "CI": "1", "TMPDIR": str(home / "tmp"),
        "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local/share"), "XDG_STATE_HOME": str(home / ".local/state"),
    }
    env.update(extra)
    return env


async def _tail(stream: asyncio.StreamReader | None, limit: int = OUTPUT_TAIL) -> str:
    """Read a stream to its end, keeping only the last ``limit`` bytes (CLIs can be chatty)."""
    if stream is None:
        return ""
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-limit:]
    return kept.decode("utf-8", errors="replace")


class ExternalCLIAgent:
    """An Agent that runs a coding-agent CLI (``adapter``) for each rollout.

    ``max_steps`` is passed to CLIs that take a turn limit, and the endpoint refuses calls beyond
    ``2 * max_steps + 4`` (room for the side calls CLIs make) so no CLI runs on without bound.
    """

    def __init__(self, adapter: CLIAdapter, *, max_steps: int = 16, timeout_s: float = 900.0,
                 model_name: str = "palaestra", include_system: bool = False) -> None:
        self.adapter = adapter
        self.name = adapter.name
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self.model_name = model_name
        self.include_system = include_system

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        netns.require_isolation(self.name)
        executable = self.adapter.locate()
        root = Path(tempfile.mkdtemp(prefix=f"pal-{self.name}-"))
        try:
            return await self._run_in(root, executable, session, tools, model, sampling)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    async def _run_in(self, root: Path, executable: str, session: SessionHandle, tools: ToolSurface,
                      model: ChatModel, sampling: dict[str, Any]) -> Trajectory:
        workdir, home = root / "work", root / "home"
        for d in (workdir, home / "tmp"):
            d.mkdir(parents=True)
        bridge = ToolBridge(tools)
        pulled = await bridge.pull(workdir)
        before = snapshot(workdir)
        label = str(getattr(model, "rollout_id", None) or uuid.uuid4().hex[:16])
        endpoint = ModelEndpoint(model, sampling, label=label, call_limit=2 * self.max_steps + 4)
        async with endpoint:
            ctx = LaunchContext(workdir=workdir, home=home, base_url=f"http://127.0.0.1:{netns.INNER_PORT}"
                                f"{endpoint.path_prefix}", prompt=prompt_text(session.messages, self.include_system),
                                model=self.model_name, max_steps=self.max_steps, executable=executable)
            self.adapter.prepare(ctx)
            argv = netns.jailed_argv(self.adapter.command(ctx), uds=endpoint.uds, cwd=str(workdir))
            env = child_environment(home, self.adapter.environment(ctx))
            code, stdout, stderr = await self._execute(argv, env)
            calls = endpoint.calls()
        backend = endpoint.backend
        if backend.errors and calls and calls[-1].response is None and not backend.limit_hit:
            raise backend.errors[-1]  # the CLI ended on a model error (one it retried past does not count)
        answered = [c for c in calls if c.response is not None]
        if not answered:
            raise AgentError(f"{self.name} CLI exited with status {code} without a model answer: "
                             f"{(stderr or stdout).strip()[-1500:] or '(no output)'}",
                             hint=f"run `{executable} --version` to check the install; see the CLI's output above")
        changes = diff(workdir, before)
        push_failed = await bridge.push(changes) if changes else {}
        messages, final = rebuild_messages(calls)
        if final is None:
            final = self.adapter.final_message(ctx, stdout)
        stop = "max_steps" if backend.limit_hit else ("final" if code == 0 else f"cli_exit_{code}")
        harness = {"cli": self.name, "dialect": self.adapter.dialect, "exit_code": code,
                   "model_calls": len(calls), "answered_calls": len(answered), "seeded_files": len(pulled),
                   "changes": changes.as_metadata(), "handed_back": bridge.can_write and bool(changes),
                   "push_failed": push_failed, "stdout_tail": stdout[-2000:], "stderr_tail": stderr[-2000:]}
        # ``harness`` is an extra field (records keep unknown ones): what the CLI did beyond its messages.
        return Trajectory.model_validate({
            "messages": messages or list(session.messages), "tool_calls": tools.records, "final_answer": final,
            "steps": len(answered), "stop_reason": stop, "harness": harness})

    async def _execute(self, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        """Run the jailed CLI; on timeout or cancellation kill its whole process group (the PID
        namespace then takes everything the CLI started with it)."""
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, start_new_session=True)
        try:
            out, err, code = await asyncio.wait_for(
                asyncio.gather(_tail(proc.stdout), _tail(proc.stderr), proc.wait()), self.timeout_s)
        except asyncio.TimeoutError:
            raise AgentError(f"{self.name} CLI ran past its {self.timeout_s:g} s limit and was killed",
                             hint="raise timeout_s, or lower max_steps") from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 5.0)
        return int(code), out, err
