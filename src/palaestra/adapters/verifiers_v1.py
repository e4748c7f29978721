"""Run a taskset of verifiers' v1 API (the whole of verifiers 0.4; ``verifiers.v1`` in 0.3) as a Palaestra
environment.

verifiers 0.4 cannot be imported into Palaestra's environment: it pins ``mcp==2.0.0`` and
``openai>=2.54``, and the same environment keeps verifiers 0.3 for the classic API. So the taskset runs
in a child process started with an interpreter that has v1 (a side venv: ``.ci/setup-verifiers.sh``
makes one), driven over its stdin/stdout by JSON lines (``verifiers_v1_bridge.py``, which imports only
the standard library and verifiers). A pipe rather than loopback HTTP: one parent, one child, requests
in order; there is no port, token or server to secure, and the child dies with its pipe. Where the
running interpreter has ``verifiers.v1`` itself (0.3), the same bridge runs under it: one code path.

What maps, as verifiers runs a single-agent taskset:

- each task of the taskset is a task: its ``system_prompt`` and ``prompt`` are the input, its data
  fields (``answer``, ...) stay verifier-only in ``metadata.vf_row``; the reference is the ``answer``
  field when the data has one;
- the tools are the ``@vf.tool`` methods of the task's and the taskset's ``vf.Toolset`` servers, under
  the names verifiers advertises (``<prefix>_<tool>``), with per-rollout ``vf.State``;
- the reward is the task's own ``score()`` (its ``@vf.reward`` functions, weighted, and ``@vf.metric``
  functions) over a ``vf.Trace`` built from the conversation; the verdict carries the weights;
- ``max_turns`` of the environment's agent (``env_args={"agent": {"max_turns": N}}``) is mirrored: the
  trace holds the first N model turns, the last one unanswered, stopped as ``max_turns``.

Refused with a clear error: environments that drive the episode themselves (their own ``Env.run``:
TextArena, OpenEnv, user simulation, several agents), reward functions that need verifiers' sandbox
runtime, and the built-in tools of verifiers' harnesses (bash in a container): only toolsets map.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from palaestra.adapters.common import check_arguments
from palaestra.adapters.verifiers import completion_messages
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, EnvironmentFailure, ToolError, UnknownTool, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict

BRIDGE = Path(__file__).resolve().parent / "verifiers_v1_bridge.py"
SETUP_HINT = ("point `python` at an interpreter with verifiers' v1 API (bash .ci/setup-verifiers.sh builds a venv "
              "with verifiers 0.4), or install verifiers>=0.3 here")
# One child per adapter class: loading a taskset can be costly, and ``env check`` makes several instances.
_CHILDREN: dict[type, VfChild] = {}


class VfChild:
    """The bridge process: one request at a time over its pipes (a lock keeps them in order)."""

    def __init__(self, python: str, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self.loaded: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._next = 0
        try:
            self._proc = subprocess.Popen([python, "-I", str(BRIDGE)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        except OSError as exc:
            raise ConfigError(f"cannot start verifiers v1 interpreter '{python}': {exc}", hint=SETUP_HINT) from None
        # stderr is drained in the background (a full pipe would block the child) and kept for messages
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr = [*self._stderr[-40:], line]

    def alive(self) -> bool:
        return self._proc.poll() is None

    def request(self, op: str, **args: Any) -> Any:
        """Send one request and read its answer; the bridge's typed failures come back as our errors. A
        request that takes longer than ``timeout_s`` kills the child (a hung tool or grader): the caller
        gets failed(environment), and the next use starts a new child."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self._proc.kill()

        with self._lock:
            self._next += 1
            assert self._proc.stdin is not None and self._proc.stdout is not None
            timer = threading.Timer(self.timeout_s, expire)
            timer.start()
            try:
                self._proc.stdin.write(json.dumps({"id": self._next, "op": op, **args}) + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except (BrokenPipeError, OSError, ValueError):  # ValueError: the pipe was closed
                line = ""
            finally:
                timer.cancel()
        if not line:
            if expired.is_set():
                raise EnvironmentFailure(f"the verifiers v1 process of '{self.name}' did not answer '{op}' within "
                                         f"{self.timeout_s:g} s and was stopped")
            tail = "".join(self._stderr[-10:]).strip()
            raise EnvironmentFailure(f"the verifiers v1 process of '{self.name}' exited (status "
                                     f"{self._proc.poll()}): {tail[-800:] or 'no output'}")
        answer = json.loads(line)
        if answer.get("ok"):
            return answer.get("result")
        kind, message = answer.get("kind"), str(answer.get("message"))
        if kind == "tool":
            raise ToolError(message, hint="fix the arguments and call the tool again")
        if kind == "session":  # the child was replaced since the session opened: its state is gone
            raise EnvironmentFailure(f"'{self.name}': {message}")
        if kind == "unsupported":
            raise ConfigError(f"'{self.name}': {message}", hint="see docs/verifiers.md for what the adapter mirrors")
        raise _Failed(message, str(answer.get("traceback") or ""))

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the bridge ends its loop; its interpreter's own exit can be slow
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


class _Failed(Exception):
    """An exception inside the verifiers process (the caller decides which failure kind it is)."""

    def __init__(self, message: str, trace: str) -> None:
        super().__init__(message)
        self.trace = trace


@dataclass
class V1Session:
    task: Task
    session: str = field(default_factory=lambda: uuid.uuid4().hex)
    opened: bool = False


def v1_interpreter(python: str | None) -> str:
    """The interpreter that runs the taskset: ``python`` when given, else this one when it has v1."""
    if python:
        if not Path(python).is_file():
            raise ConfigError(f"verifiers v1 interpreter '{python}' does not exist", hint=SETUP_HINT)
        return python
    if importlib.util.find_spec("verifiers") is not None and importlib.util.find_spec("verifiers.v1") is not None:
        return sys.executable
    raise ConfigError("no interpreter with verifiers' v1 API: this one has none", hint=SETUP_HINT)


def _user_paths() -> list[str]:
    """This process's import path less the interpreter's own folders: where the user's taskset modules are
    found here, they are found in the child too (its own site-packages stay its own)."""
    own = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"]) if p}
    out = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.curdir)
        if "site-packages" in path or "dist-packages" in path or any(path.startswith(o) for o in own):
            continue
        out.append(path)
    return out


class VerifiersV1Environment(Environment):
    """A verifiers v1 taskset behind Palaestra's session API. Subclass and name the taskset."""

    domain = "verifiers"
    taskset: ClassVar[str | None] = None  # a v1 taskset id: a module exporting one vf.Taskset in __all__
    taskset_args: ClassVar[dict[str, Any]] = {}  # the taskset's config fields (vf.TasksetConfig)
    env_args: ClassVar[dict[str, Any]] = {}  # the env config, e.g. {"agent": {"max_turns": 4}}
    python: ClassVar[str | None] = None  # an interpreter with verifiers v1; None: this one
    limit: ClassVar[int | None] = None
    request_timeout_s: ClassVar[float] = 600.0  # one load, tool call or score; past it the child is stopped

    # ---- the child -----------------------------------------------------------------------------
    def child(self) -> VfChild:
        """The running child with the taskset loaded; a child that died (or was stopped) is replaced."""
        proc = _CHILDREN.get(type(self))
        if proc is not None and not proc.alive():
            _CHILDREN.pop(type(self), None)
            proc = None
        if proc is None:
            if not self.taskset:
                raise ConfigError(f"verifiers v1 environment '{self.name}' does not say what to load",
                                  hint="set taskset = 'my_taskset' (a module exporting one vf.Taskset)")
            proc = VfChild(v1_interpreter(self.python), self.name, self.request_timeout_s)
            try:
                proc.loaded = proc.request("load", taskset=self.taskset, taskset_args=dict(self.taskset_args),
                                           env_args=dict(self.env_args), paths=_user_paths(), limit=self.limit)
            except _Failed as exc:
                proc.close()
                raise ConfigError(f"verifiers v1 taskset '{self.taskset}' did not load: {exc}",
                                  hint=exc.trace.strip().splitlines()[-1] if exc.trace.strip() else None) from None
            except BaseException:
                proc.close()
                raise
            _CHILDREN[type(self)] = proc
        return proc

    @property
    def loaded(self) -> dict[str, Any]:
        """What the child answered to ``load``: tasks, tools, max_turns, the verifiers version."""
        return self.child().loaded

    @property
    def verifiers_version(self) -> str:
        """The verifiers version the child runs (answered by the child, not assumed)."""
        return str(self.loaded["version"])

    # ---- tasks ---------------------------------------------------------------------------------
    def examples(self) -> list[Task]:
        loaded = self.loaded
        tasks = []
        for i, row in enumerate(loaded["tasks"]):
            data = dict(row["data"])
            meta: dict[str, Any] = {"vf_row": data, "answer": data.get("answer"), "vf_index": i,
                                    "verifiers": loaded["version"]}
            if loaded.get("max_turns"):
                meta["max_turns"] = int(loaded["max_turns"])
            tasks.append(Task(id=f"{self.name}-{data.get('idx', i)}", env=self.name, input=row["messages"],
                              metadata=meta))
        return tasks

    def _index(self, task: Task) -> int:
        index = task.metadata.get("vf_index")
        if not isinstance(index, int) or not 0 <= index < len(self.loaded["tasks"]):
            raise VerifierError(f"task '{task.id}' is not one of '{self.name}''s tasks (no vf_index)",
                                hint="take tasks from this environment's examples()")
        return index

    def reference(self, task: Task) -> Reference | None:
        """The task data's ``answer`` field (the answer column), when the taskset has one."""
        answer = task.metadata.get("answer")
        return None if answer is None else Reference(final_answer=str(answer))

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        tools = [json.loads(json.dumps(t)) for t in self.loaded["tools"]]
        for t in tools:
            t["function"]["parameters"].setdefault("type", "object")
            t["function"]["parameters"].setdefault("additionalProperties", False)
        return tools

    # ---- sessions and tools --------------------------------------------------------------------
    def seed(self, task: Task) -> V1Session:
        return V1Session(task)

    async def dynamic_tool(self, state: V1Session, name: str, arguments: Any) -> Any:
        tools = {t["function"]["name"]: t for t in self.tool_schemas()}
        if name not in tools:
            raise UnknownTool(f"unknown tool '{name}' in environment '{self.name}'",
                              hint=f"available tools: {', '.join(sorted(tools)) or '(none)'}")
        args = check_arguments(tools[name]["function"]["parameters"], arguments, name)
        child = self.child()
        try:
            if not state.opened:
                await asyncio.to_thread(child.request, "open", session=state.session, index=self._index(state.task))
                state.opened = True
            return await asyncio.to_thread(child.request, "call", session=state.session, name=name, arguments=args)
        except _Failed as exc:
            raise EnvironmentFailure(f"tool server of '{self.name}' failed: {exc}") from None

    async def close(self, state: V1Session) -> None:
        proc = _CHILDREN.get(type(self))
        if state.opened and proc is not None and proc.alive():  # a replaced child has forgotten it already
            await asyncio.to_thread(proc.request, "close", session=state.session)

    # ---- scoring -------------------------------------------------------------------------------
    async def verify(self, state: V1Session, trajectory: Trajectory) -> Verdict:
        task = state.task
        max_turns = int(self.loaded.get("max_turns") or -1)
        completion = completion_messages(task, trajectory, max_turns)
        turns = sum(1 for m in completion if m.get("role") == "assistant")
        try:
            scored = await asyncio.to_thread(self.child().request, "score", index=self._index(task),
                                             messages=[*task.messages(), *completion],
                                             truncated=max_turns > 0 and turns >= max_turns)
        except _Failed as exc:
            raise VerifierError(f"the task's scoring in '{self.name}' raised: {exc}",
                                hint="a reward function failed; it is not a score of 0") from None
        rewards = scored["rewards"]
        components = {str(k): float(r["score"]) for k, r in rewards.items()}
        components.update({str(k): float(v) for k, v in scored["metrics"].items() if isinstance(v, (int, float))})
        reward = float(scored["reward"])
        full = sum(float(r["weight"]) for r in rewards.values() if float(r["weight"]) > 0) or 1.0
        return Verdict(reward=reward, passed=reward >= full - 1e-9, components=components,
                       metadata={"weights": {str(k): float(r["weight"]) for k, r in rewards.items()},
                                 "verifiers": self.loaded["version"]},
                       answer=trajectory.final_text() or None)


def close_children() -> None:
    """Stop every bridge process (tests and long-lived hosts call this; they also end with the parent)."""
    for proc in list(_CHILDREN.values()):
        proc.close()
    _CHILDREN.clear()
