"""``harbor``: Harbor task directories run the way Harbor runs them.

Per rollout: the task image is built from ``environment/Dockerfile`` (``sandbox.images``: cached by a
content hash, a missing base replaced by a local one and recorded), one container is started from it
(``sandbox.task_container``: the image's working directory, user and writable root), the agent works in
it, and only after the agent finished are the task's ``tests/`` copied to ``/tests``; ``tests/test.sh``
then runs in the *same* container, and its reward is read from ``/logs/verifier/reward.txt`` or
``reward.json`` (Harbor's spec: the reward file is the verdict; a TB1 conversion grades by exit status).
``task.toml`` timeouts apply (``[agent]``: the agent's commands share that budget; ``[verifier]``; the
image build gets ``[environment] build_timeout_sec``) and so do its limits (``memory_mb``, ``cpus``).

Failures are typed, never a 0: a build that fails is ``failed(environment)`` with the build log's tail, a
step or test that needs a host this machine cannot reach ``failed(environment)`` with reason
``needs_network: HOST``, a grader that cannot run ``failed(...)`` per ``palaestra.core.grading``.

Without docker or podman the task runs on the ``terminal`` environment's sandboxes instead, and every
verdict carries ``approximate`` (the Dockerfile's steps did not run); ``require_engine=True`` refuses
instead, before any sandbox starts.
"""

from __future__ import annotations

import base64
import io
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from palaestra.core.errors import ToolError
from palaestra.core.grading import GradingFailure, GradingProbe, RewardFile, TestRun, grade_test_run, require_network
from palaestra.core.records import Reference, Rollout, Task, ToolCall, Trajectory, Verdict
from palaestra.core.tools import tool
from palaestra.envs.terminal.env import Terminal, TerminalState, _network, _writes_reward
from palaestra.envs.terminal.taskdir import TaskDir
from palaestra.sandbox import SandboxSpec, available_providers, get_provider
from palaestra.sandbox.envsupport import labels_for
from palaestra.sandbox.images import BuiltImage, ImageBuilder, needed_host
from palaestra.sandbox.task_container import engine_command, open_files_limit, task_provider

ENGINES = ("docker", "podman")
_RUN_TEST = ('rm -rf /logs/verifier && mkdir -p /logs/verifier /logs/agent && '
             'if command -v bash >/dev/null 2>&1; then exec bash "$1"; else exec sh "$1"; fi')
_REWARDS = ("reward.txt", "reward.json")


@dataclass
class HarborState(TerminalState):
    image: BuiltImage | None = None
    deadline: float = 0.0  # the agent's budget ([agent] timeout_sec), as a monotonic time
    approximate: dict[str, Any] | None = None


def find_engine(preferred: str | None = None) -> tuple[str, list[str]] | None:
    """(engine name, its CLI with global flags) of the first container engine that answers here,
    ``preferred`` first; through the sandbox providers of those names, so their settings apply."""
    names = [preferred] if preferred in ENGINES else list(ENGINES)
    found = available_providers()
    for name in names:
        if name and found.get(name, (False, ""))[0]:
            return name, engine_command(get_provider(name))
    return None


class HarborEnvironment(Terminal):
    """Harbor tasks in a container built from their Dockerfile; graded in that container."""

    name = "harbor"
    version = "0.1"
    description = ("Harbor/Terminal-Bench task directories: image built from the Dockerfile, tests run in the same "
                   "container.")
    system_prompt = ("You are working in a Linux container. Your current directory holds the task's files. Use the "
                     "tools: run(cmd) runs a shell command there, write_file and read_file handle files. Finish the "
                     "task, then reply with a short summary of what you did.")

    def __init__(self, sandbox: str | None = None, *, run_id: str | None = None, base_image: str | None = None,
                 base_images: dict[str, str] | None = None, build_network: Literal["host", "none"] = "host",
                 require_engine: bool = False) -> None:
        """``sandbox``: ``docker`` or ``podman`` (default: whichever answers); any other provider name runs
        tasks approximately on it. ``base_image``: the local image that stands in for a ``FROM`` image this
        machine lacks (``base_images`` per wanted image); ``build_network``: what ``RUN`` steps reach;
        ``require_engine``: refuse, rather than approximate, where no engine answers (always so when an
        engine is named: asked for docker, a run never quietly approximates)."""
        wanted = sandbox if sandbox in ENGINES or sandbox is None else None
        super().__init__(None if wanted or sandbox is None else sandbox, run_id=run_id)
        self.require_engine = require_engine or wanted is not None
        self.engine = find_engine(wanted) if (wanted or sandbox is None) else None
        self.builder = ImageBuilder(self.engine[1], base_images=base_images, default_base=base_image,
                                    network=build_network) if self.engine else None
        self._images: dict[Path, BuiltImage] = {}

    def examples(self) -> list[Task]:
        return []

    def _refuse(self, task: Task) -> None:
        if self.engine is None and self.require_engine:
            raise GradingFailure("environment", "no_container_engine", f"task '{task.id}' is a Harbor task built from "
                                 "its Dockerfile, and neither docker nor podman answers on this machine",
                                 hint="install docker or podman, or allow approximate runs (require_engine=false)")

    def preflight(self, tasks: list[Task]) -> dict[str, Any]:
        """Before anything starts: the engine in use, or why runs are refused or approximate."""
        if self.engine is None and self.require_engine and tasks:
            self._refuse(tasks[0])
        return {"engine": self.engine[0] if self.engine else None,
                "approximate": self.engine is None}

    async def _image(self, task: Task, td: TaskDir) -> BuiltImage:
        assert self.builder is not None
        built = self._images.get(td.path)
        prebuilt = task.metadata.get("image")  # task.toml's docker_image: Harbor runs it as it is
        if built is None and isinstance(prebuilt, str) and prebuilt:
            if await self.builder.image_id(prebuilt) is None:
                raise GradingFailure("environment", "image_missing", f"task '{task.id}' runs the image '{prebuilt}', "
                                     "which is not on this machine (no registry is reachable)",
                                     hint=f"load it first (`{self.builder.engine} load -i IMAGE.tar`)")
            built = BuiltImage(tag=prebuilt, engine=self.builder.engine, digest="", cached=True)
            await self.builder.configure(built)
            self._images[td.path] = built
        if built is None:
            harbor = task.metadata.get("harbor") or {}
            context = td.path / "environment"
            if not (context / "Dockerfile").is_file():
                raise GradingFailure("environment", "no_dockerfile", f"task '{task.id}' has no environment/Dockerfile "
                                     "to build its image from", hint="add one, or set metadata.image")
            built = await self.builder.build(context, context / "Dockerfile",
                                             timeout=float(harbor.get("build_timeout_sec") or 600.0),
                                             labels={"task": task.id[:100]},
                                             default_base=task.metadata.get("base_image") or None)
            self._images[td.path] = built
        return built

    async def seed(self, task: Task) -> HarborState:
        td = self._taskdir(self._path(task))
        self._refuse(task)
        require_network(td.needs_network, _network(task) == "host", task=task,
                        why="; ".join(sorted(set(td.needs_network.values()))) + " in task.toml")
        others = compose_services(td.path / "environment")
        if others:
            raise GradingFailure("environment", f"compose_services: {', '.join(others)}", f"task '{task.id}' needs "
                                 f"the docker-compose services {', '.join(others)} beside its own container, which "
                                 "this environment does not start", hint="run it with Harbor's docker-compose "
                                 "environment, or fold the services into the task's image")
        if self.engine is None:  # the terminal environment's way: the Dockerfile's steps do not run
            base = await super().seed(task)
            return HarborState(base.task, base.taskdir, base.box, deadline=time.monotonic() + td.agent_timeout_s,
                               approximate={"reason": "no_container_engine",
                                            "detail": "neither docker nor podman answers; Dockerfile steps not run"})
        image = await self._image(task, td)
        harbor = task.metadata.get("harbor") or {}
        home = image.env.get("HOME") or ("/root" if image.user in ("", "0", "root", "0:0") else "/tmp")
        spec = SandboxSpec(image=image.tag, workdir=image.workdir, memory_mb=int(task.metadata.get("memory_mb", 2048)),
                           cpus=float(harbor["cpus"]) if harbor.get("cpus") else None, pids=4096, disk_mb=None,
                           env={"HOME": home}, network=_network(task), open_files=open_files_limit(),
                           labels=labels_for(self.name, task, run_id=self.run_id, role="task"),
                           lifetime_s=td.agent_timeout_s + td.verifier_timeout_s + 600, keep_background=True)
        box = await task_provider(self.engine[0], image.user).create(spec)
        try:  # a minimal base may lack a home directory; a podman build may leave WORKDIR uncreated
            made = await box.exec(["/bin/sh", "-c", 'mkdir -p "$HOME" "$1"', "sh", image.workdir], timeout=60, cwd="/")
            if not made.ok:
                raise GradingFailure("sandbox", "sandbox_setup", f"the task container could not be prepared: "
                                     f"{made.summary(500)}")
        except BaseException:
            await box.close()
            raise
        return HarborState(task, td, box, image=image, deadline=time.monotonic() + td.agent_timeout_s)

    @tool
    async def run(self, state: TerminalState, cmd: str, timeout_s: float = 30.0) -> str:
        """Run a shell command (bash when available) in the working directory.

        Args:
            cmd: the command line.
            timeout_s: seconds before the command and everything it started are killed (at most 600).
        """
        left = getattr(state, "deadline", 0.0) - time.monotonic()
        if left <= 0:
            raise ToolError("the task's agent time ([agent] timeout_sec) is used up", hint="reply with your summary")
        return await super().run(state, cmd, timeout_s=min(timeout_s, left))

    async def verify(self, state: TerminalState, trajectory: Trajectory) -> Verdict:
        assert isinstance(state, HarborState)
        if state.image is None:
            verdict = await super().verify(state, trajectory)
            verdict.metadata["approximate"] = state.approximate
            return verdict
        td, box = state.taskdir, state.box
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for rel, data in td.tests.items():
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(data), 0o755
                tar.addfile(info, io.BytesIO(data))
        try:
            await box.upload_tar(buf.getvalue(), "/tests")  # only now: the agent never saw the tests
        except ValueError as exc:
            raise GradingFailure("sandbox", "sandbox_setup", f"the tests could not be copied in: {exc}") from exc
        result = await box.exec(["/bin/sh", "-c", _RUN_TEST, "sh", "/tests/test.sh"], timeout=td.verifier_timeout_s,
                                env={"TESTS_DIR": "/tests", "TEST_DIR": "/tests",
                                     "PALAESTRA_REWARD_FILE": "/logs/verifier/reward.txt"})
        rewards = [await _reward(box, name) for name in _REWARDS]
        run = TestRun(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr, failure=result.failure,
                      detail=result.detail, timeout_s=td.verifier_timeout_s, reward_files=rewards,
                      agent_paths=(box.workdir,))
        try:
            verdict = grade_test_run(run, reward_required=_writes_reward(td.tests))
        except GradingFailure as exc:
            host = needed_host(run.output()) if exc.failure == "environment" else None
            if host:
                raise GradingFailure("environment", f"needs_network: {host}", f"the test needs {host}, which this "
                                     "container cannot reach", output_tail=run.tail(),
                                     hint="vendor it into the image, or set metadata.network = \"host\"") from None
            raise
        assert state.image is not None
        verdict.metadata["image"] = state.image.describe()
        return verdict

    def grading_probes(self, task: Task, workdir: Path) -> list[GradingProbe]:
        """The terminal environment's probes (a missing test runner, an unparsable reward), each with this
        task's ``environment/`` so that the probe's image is the task's own."""
        probes = super().grading_probes(task, workdir)
        source = self._path(task) / "environment"
        for probe in probes:
            root = Path(str(probe.task.metadata["task_dir"]))
            if source.is_dir() and not (root / "environment").exists():
                shutil.copytree(source, root / "environment", symlinks=True)
        return probes

    def reference(self, task: Task) -> Reference | None:
        """Harbor's oracle: ``solution/`` copied to ``/solution`` and ``solve.sh`` run from the working
        directory (approximate runs keep the terminal environment's reference)."""
        path = self._path(task)
        solve = path / "solution" / "solve.sh"
        if self.engine is None or not solve.is_file():
            return super().reference(task)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(str(path / "solution"), ".")
        packed = base64.b64encode(buf.getvalue()).decode()
        cmd = (f"(rm -rf /solution && mkdir -p /solution && cd /solution && printf '%s' '{packed}' | base64 -d | "
               "tar -xzf -) && bash /solution/solve.sh")
        timeout = min(600.0, self._taskdir(path).agent_timeout_s)
        return Reference(tool_calls=[ToolCall(name="run", arguments={"cmd": cmd, "timeout_s": timeout})],
                         final_answer="Done.")

    def metrics(self, rollouts: list[Rollout]) -> dict[str, Any]:
        """How many verdicts came from a substituted base image, from the image cache, or approximately."""
        counts = {"base_substituted": 0, "image_cached": 0, "approximate": 0}
        for rollout in rollouts:
            meta = rollout.verdict.metadata if rollout.verdict is not None else {}
            image = meta.get("image") or {}
            counts["base_substituted"] += bool(image.get("base_substituted"))
            counts["image_cached"] += bool(image.get("cached"))
            counts["approximate"] += bool(meta.get("approximate"))
        return counts


def compose_services(environment: Path) -> list[str]:
    """The services a task's ``docker-compose.yaml`` starts beside the one the agent works in (TB1's
    ``client``, Harbor's ``main``): those are not run here, so such a task cannot be graded as meant."""
    import yaml

    for name in ("docker-compose.yaml", "docker-compose.yml"):
        path = environment / name
        if path.is_file():
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (yaml.YAMLError, UnicodeDecodeError):
                return [f"{name} (unreadable)"]
            services = data.get("services") if isinstance(data, dict) else None
            return sorted(str(k) for k in (services or {}) if k not in ("client", "main"))
    return []


async def _reward(box: Any, name: str) -> RewardFile:
    try:
        data = await box.download(f"/logs/verifier/{name}", max_bytes=4096)
    except ValueError as exc:
        return RewardFile(name) if "No such file" in str(exc) else RewardFile(name, error=str(exc)[:300])
    return RewardFile(name, text=data.decode(errors="replace"))
