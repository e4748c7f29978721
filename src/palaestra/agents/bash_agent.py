"""The ``bash`` agent: a mini-SWE-style loop. The model answers with one shell command per turn (a
```bash block); the command runs in the rollout's sandbox through the environment's shell tool, its
output comes back (head and tail kept when long), and the loop ends when the model submits.

It drives any environment with a shell tool: ``run(cmd)`` (terminal) or, failing that, ``run_python(code)``
(code), where the command runs through ``subprocess``. A model that emits a ``run``/``bash`` tool call
instead of a block is understood too."""

from __future__ import annotations

import re
from typing import Any

import orjson

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.agents.tool_agent import first_message
from palaestra.core.records import Task, Trajectory
from palaestra.wire.env import SessionHandle

SUBMIT = "submit"
_BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)```", re.DOTALL)

SYSTEM = (
    "You solve the task by running shell commands in a Linux sandbox, one per reply.\n"
    "Reply with a short thought and exactly one command in a ```bash block. You will see its output.\n"
    f"When you are done, reply with a ```bash block whose first line is `{SUBMIT}`; anything after that line "
    "(or outside the block) is your final answer."
)

_PY_SHELL = (
    "import subprocess, sys\n"
    "r = subprocess.run({cmd!r}, shell=True, capture_output=True, text=True, timeout={timeout})\n"
    "sys.stdout.write(r.stdout); sys.stdout.write(r.stderr); print('[exit code %d]' % r.returncode)\n"
)


def _clip(text: str, limit: int) -> str:
    """Head and tail of a long output: errors tend to be at the end, context at the start."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def parse_command(message: dict[str, Any]) -> tuple[str | None, str]:
    """(command or None, the message's text). Tool calls named run/bash/shell count as commands."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        if fn.get("name") in ("run", "bash", "shell"):
            try:
                args = orjson.loads(fn.get("arguments") or "{}")
            except orjson.JSONDecodeError:
                args = {}
            cmd = args.get("cmd") or args.get("command") if isinstance(args, dict) else None
            if isinstance(cmd, str):
                return cmd, text
    blocks = _BLOCK.findall(text)
    return (blocks[0].strip() if blocks else None), text


class BashAgent:
    name = "bash"

    def __init__(self, max_steps: int = 16, *, output_limit: int = 10_000, command_timeout_s: float = 30.0) -> None:
        self.max_steps = max_steps
        self.output_limit = output_limit
        self.command_timeout_s = command_timeout_s

    async def _execute(self, tools: ToolSurface, cmd: str) -> str:
        if "run" in tools.names:
            result = await tools.call("run", {"cmd": cmd, "timeout_s": self.command_timeout_s})
        elif "run_python" in tools.names:
            code = _PY_SHELL.format(cmd=cmd, timeout=self.command_timeout_s)
            result = await tools.call("run_python", {"code": code, "timeout_s": self.command_timeout_s + 5})
        else:
            return "Error: this environment has no shell tool (run or run_python); submit your answer instead."
        if result.error:
            return f"Error ({result.error.get('kind')}): {result.error.get('message')}"
        out = result.output if isinstance(result.output, str) else orjson.dumps(result.output).decode()
        return _clip(out, self.output_limit)

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        env_system = [str(m.get("content") or "") for m in session.messages if m.get("role") == "system"]
        system = "\n\n".join([SYSTEM, *env_system])  # one system message: many chat templates take no second
        traj = Trajectory(messages=[{"role": "system", "content": system},
                                    *(m for m in session.messages if m.get("role") != "system")])
        messages = traj.messages  # the model copies what it is given: append to its own list
        for step in range(self.max_steps):
            msg = first_message(await model.chat({"messages": list(messages), **sampling}))
            cmd, text = parse_command(msg)
            messages.append({"role": "assistant", "content": text})
            traj.steps = step + 1
            if cmd is not None and cmd.splitlines()[0].strip() == SUBMIT:
                rest = "\n".join(cmd.splitlines()[1:]).strip()
                traj.final_answer = rest or _BLOCK.sub("", text).strip()
                traj.stop_reason = "submit"
                break
            if cmd is None:
                traj.parse_failures += 1
                messages.append({"role": "user", "content": "Reply with exactly one command in a ```bash block, "
                                                            f"or a block starting with `{SUBMIT}` when done."})
                continue
            observation = await self._execute(tools, cmd)
            messages.append({"role": "user", "content": f"Output:\n{observation}"})
        else:
            traj.stop_reason = "max_steps"
        traj.tool_calls = tools.records
        return traj
