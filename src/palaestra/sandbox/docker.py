"""``docker`` (and ``podman``, the same CLI, in ``podman.py``): one container per sandbox, driven through the CLI by
container name, so a crash between ``run`` and the record update still leaves a name the reaper knows.

Containers run with ``--network none``, no capabilities, ``no-new-privileges``, a read-only root with
size-limited tmpfs for ``workdir`` and ``/tmp``, memory/pids/CPU limits, as an unprivileged user
(``$PALAESTRA_DOCKER_USER``, default ``65534:65534``), labelled with the sandbox id, owner and the
spec's labels. Each exec is wrapped so that everything it started dies with it (``kill -9 -1`` as the
sandbox user, which spares the container's pid 1); on timeout the same kill runs from a second exec.
Files move through ``exec`` (``cat``/``tar``), so the image needs ``sh``, ``cat`` and ``tar``.

Nothing is pulled by default (pull policy ``never``): a grading run must not reach the internet, and an
image that is not on the machine is a failure that names it and the command that builds it. ``missing``
or ``always`` (the ``pull`` argument, or ``$PALAESTRA_DOCKER_PULL``) let the engine pull.

``runtime`` (the provider option ``docker?runtime=runsc``) picks the OCI runtime: ``runsc`` puts each
container in a gVisor sandbox (a user-space kernel between the code and the host's), which the daemon must
know, with ``--network=none`` (a ``runtimes`` entry in daemon.json: gVisor will not start networking in
the host's namespace, which is what ``--network none`` leaves it); a daemon without it is refused at creation.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.capture import decode
from palaestra.sandbox.docker_box import DockerSandbox, cli, docker_exec_args, seed_files
from palaestra.sandbox.registry import Registry, is_own, new_box_id, owner_alive, owner_fields
from palaestra.sandbox.types import SandboxError, SandboxSpec
from palaestra.settings import Settings, machine

PULL_POLICIES = ("never", "missing", "always")
RUNTIMES = ("runc", "runsc", "crun")
RUNSC_HOST_PIDS = 4096  # host threads a gVisor sandbox may use (its sentry's), whatever the spec's pids
# pid 1 of every container: waits on a child so that a TERM (``podman rm -f`` sends one first) ends it at once
_KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


class DockerProvider(SandboxProvider):
    name = "docker"
    binary_env: ClassVar[str] = "PALAESTRA_DOCKER"
    binary_setting: ClassVar[str] = "docker_bin"
    default_binary: ClassVar[str] = "docker"

    def __init__(self, registry: Registry | None = None, *, reap: bool = True, image: str | None = None,
                 pull: str | None = None, runtime: str | None = None, settings: Settings | None = None) -> None:
        """``image``: used when a spec names none; ``pull``: ``never`` (the default), ``missing`` or
        ``always``. Left out, each falls back to ``settings`` (``$PALAESTRA_DOCKER_*``). ``runtime``: the
        OCI runtime (``runsc`` for gVisor), checked against the engine now rather than at the first run."""
        s = machine(settings)
        self.binary = self._binary(s) or self.default_binary
        self.user = s.docker_user
        self.image = image or s.docker_image
        self.pull = (pull or s.docker_pull or "never").strip().lower()
        if self.pull not in PULL_POLICIES:
            raise SandboxError(f"unknown docker pull policy {self.pull!r}",
                               hint=f"use one of {', '.join(PULL_POLICIES)}")
        self.runtime = (runtime or "").strip().lower() or None
        if self.runtime is not None:
            if self.runtime not in RUNTIMES:
                raise SandboxError(f"unknown OCI runtime {self.runtime!r}", hint=f"use one of {', '.join(RUNTIMES)}")
            ok, why = self.runtime_available(self.runtime)
            if not ok:
                raise SandboxError(f"{self.name} cannot use the OCI runtime {self.runtime}: {why}",
                                   hint=self.runtime_hint(self.runtime))
        self.registry = registry or Registry()
        if reap:
            self.cleanup()

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return _engine_probe(cls._binary(machine()) or "")

    @property
    def engine(self) -> list[str]:
        """The CLI and its global flags: what comes before every subcommand."""
        return [self.binary, *self.global_flags()]

    def global_flags(self) -> list[str]:
        return []

    def exec_args(self, container: str, *, user: str, cwd: str | None, env: Mapping[str, str],
                  interactive: bool) -> list[str]:
        return docker_exec_args(container, user=user, cwd=cwd, env=env, interactive=interactive)

    @property
    def host_processes(self) -> bool:
        return self.runtime != "runsc"

    async def container_state(self, container: str) -> str:
        cap = await cli(*self.engine, "inspect", "-f", "{{.State.Status}}", container, timeout=15)
        return decode(cap.stdout).strip() or "missing"

    async def remove_container(self, container: str) -> None:
        await cli(*self.engine, "rm", "-f", "-v", container, timeout=60)

    def run_flags(self, spec: SandboxSpec) -> list[str]:
        """Per-container flags a subclass adds (podman: the ulimits its runtime needs)."""
        return ["--runtime", self.runtime] if self.runtime else []

    def tmpfs_owner(self, uid: str, gid: str) -> str:
        """The tmpfs option that gives the workdir to the sandbox user (podman spells it ``U``)."""
        return f"uid={uid},gid={gid}"

    def runtime_available(self, runtime: str) -> tuple[bool, str]:
        """Whether the daemon has ``runtime`` registered (``docker info`` lists its runtimes)."""
        try:
            proc = subprocess.run([*self.engine, "info", "--format", "{{json .Runtimes}}"], capture_output=True,
                                  text=True, timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"`{self.binary} info` failed: {exc}"
        if proc.returncode != 0:
            return False, f"`{self.binary} info` failed: {proc.stderr.strip()[:200]}"
        if f'"{runtime}"' not in proc.stdout:
            return False, f"the daemon has no '{runtime}' runtime"
        return True, f"runtime {runtime}"

    def runtime_hint(self, runtime: str) -> str:
        path = shutil.which(runtime) or f"/usr/bin/{runtime}"
        args = ', "runtimeArgs": ["--network=none"]' if runtime == "runsc" else ""
        missing = "" if shutil.which(runtime) else f"; install {runtime} first (Debian: apt-get install {runtime})"
        return (f'register it with dockerd: {{"runtimes": {{"{runtime}": {{"path": "{path}"{args}}}}}}} in '
                f"/etc/docker/daemon.json, then restart dockerd{missing}")

    @classmethod
    def _binary(cls, settings: Settings) -> str | None:
        """``$PALAESTRA_DOCKER`` (``$PALAESTRA_PODMAN``), else the engine on PATH."""
        return getattr(settings, cls.binary_setting) or shutil.which(cls.default_binary)

    async def create(self, spec: SandboxSpec | None = None) -> DockerSandbox:
        self.require()
        spec = spec or SandboxSpec()
        image = spec.image or self.image
        if not image:
            raise SandboxError("the docker provider needs an image",
                               hint="set SandboxSpec.image, a task's metadata.image, or PALAESTRA_DOCKER_IMAGE")
        box_id = new_box_id(self.name)
        now = time.time()
        record: dict[str, Any] = {"id": box_id, "provider": self.name, "container": f"palaestra-{box_id}",
                                  "created": now, "labels": dict(spec.labels), **owner_fields(),
                                  "expires_at": now + spec.lifetime_s if spec.lifetime_s else None}
        self.registry.write(record)
        try:
            box = DockerSandbox(self, spec, record, await self._start(spec, record, image))
            if spec.files:
                await seed_files(box, spec.files)
        except BaseException:
            await self.remove_container(record["container"])
            self.registry.remove(box_id)
            raise
        return box

    async def _start(self, spec: SandboxSpec, record: dict[str, Any], image: str) -> str:
        """Start the container named in ``record``; returns its full id."""
        cap = await cli(*self.engine, *self._run_args(spec, record, image), timeout=120)
        if cap.returncode != 0:
            raise await self._run_failure(image, decode(cap.stderr).strip())
        return decode(cap.stdout).strip()

    def _run_args(self, spec: SandboxSpec, record: dict[str, Any], image: str) -> list[str]:
        uid, _, gid = self.user.partition(":")
        disk = f"{spec.disk_mb}m" if spec.disk_mb else "1g"
        owner = self.tmpfs_owner(uid, gid or uid)
        args = ["run", "-d", "--name", record["container"], "--label", f"palaestra.sandbox={record['id']}",
                "--label", f"palaestra.owner={record['owner_pid']}:{record['owner_start']}",
                "--label", f"palaestra.host={record['host']}", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--user", self.user, "--read-only",
                "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={disk},mode=1777",
                "--tmpfs", f"{spec.workdir}:rw,exec,nosuid,nodev,size={disk},{owner},mode=0755",
                "--workdir", spec.workdir, "--ulimit", f"nofile={spec.open_files}:{spec.open_files}",
                "--ulimit", "core=0", "--entrypoint", "/bin/sh"]
        args += ["--pull", self.pull, *self.run_flags(spec)]
        for key, value in spec.labels.items():
            args += ["--label", f"palaestra.label.{key}={value}"]
        if spec.network == "none":
            args += ["--network", "none"]
        if spec.memory_mb:
            args += ["--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m"]
        if spec.pids and self.runtime == "runsc":
            # gVisor's sentry runs the sandbox's processes as its own host threads (50 idle, ~200 busy), so
            # the host cgroup only backstops; the process limit is enforced by gVisor's kernel as RLIMIT_NPROC
            args += ["--pids-limit", str(RUNSC_HOST_PIDS), "--ulimit", f"nproc={spec.pids + 4}:{spec.pids + 4}"]
        elif spec.pids:
            args += ["--pids-limit", str(spec.pids + 4)]
        if spec.cpus:
            args += ["--cpus", str(spec.cpus)]
        if spec.cpu_time_s:
            args += ["--ulimit", f"cpu={spec.cpu_time_s}:{spec.cpu_time_s}"]
        for m in spec.mounts:
            args += ["-v", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        return [*args, image, "-c", _KEEPALIVE]

    async def _run_failure(self, image: str, stderr: str) -> SandboxError:
        """Why ``run`` failed, as a failure that says what to do: a missing image is named, with the
        command that builds it (nothing is downloaded under the ``never`` policy)."""
        have = await cli(*self.engine, "image", "inspect", "--format", "{{.Id}}", image, timeout=30)
        if have.returncode != 0 and self.pull == "never":
            return SandboxError(
                f"docker image '{image}' is not on this machine, and the pull policy is 'never' (nothing is "
                f"downloaded): {stderr[:300]}",
                hint=f"build it first: `{self.binary} build -t {image} DIR` (a Dockerfile in DIR), or "
                     f"`{self.binary} import ROOTFS.tar {image}`, or `{self.binary} load -i IMAGE.tar`; to let the "
                     "engine download it instead, use pull policy 'missing'")
        if have.returncode != 0:
            return SandboxError(f"docker image '{image}' is not on this machine and could not be pulled: "
                                f"{stderr[:400]}",
                                hint=f"build it with `{self.binary} build -t {image} DIR`, or check the registry")
        return SandboxError(f"{self.binary} run {image} failed: {stderr[:500]}",
                            hint="check the engine (`docker info`) and that the image has /bin/sh")

    def cleanup(self, *, include_live: bool = False) -> int:
        """Remove containers of dead owners: by registry record, and by label for records lost."""
        removed = 0
        names: set[str] = set()
        for record in list(self.registry.records(self.name)):
            expired = record.get("expires_at") is not None and time.time() > float(record["expires_at"]) + 5
            if (include_live and is_own(record)) or not owner_alive(record) or expired:
                names.add(str(record["container"]))
                self.registry.remove(str(record["id"]))
        try:
            listed = subprocess.run([*self.engine, "ps", "-a", "--filter", "label=palaestra.sandbox", "--format",
                                     '{{.Names}}\t{{.Label "palaestra.owner"}}\t{{.Label "palaestra.host"}}'],
                                    capture_output=True, text=True, timeout=30)
            for line in listed.stdout.splitlines():
                cname, owner, host = (line.split("\t") + ["", ""])[:3]
                pid, _, start = owner.partition(":")
                rec = {"owner_pid": int(pid) if pid.isdigit() else None, "host": host or None,
                       "owner_start": int(start) if start.isdigit() else None}
                if not owner_alive(rec) or (include_live and is_own(rec)):
                    names.add(cname)
            if names:
                subprocess.run([*self.engine, "rm", "-f", "-v", *sorted(names)], capture_output=True, timeout=120)
                removed = len(names)
        except (OSError, subprocess.SubprocessError):
            pass
        if names:
            self._kill_attached(names)
        return removed

    def _kill_attached(self, names: set[str]) -> None:
        """Kill the processes still attached to a removed container: the engine's ``exec`` clients and
        podman's ``conmon`` monitors (one per container and per exec session, each naming the container).
        A dead owner's clients are orphans; most notice the removal and exit, but under load or gVisor one
        can hang on, a leaked process."""
        binary = os.path.basename(self.engine[0])
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                argv = [a.decode(errors="replace") for a in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")]
            except OSError:
                continue
            program = os.path.basename(argv[0]) if argv else ""
            attached = (program == binary and "exec" in argv[1:]) or program == "conmon"
            if attached and names & set(argv):
                with contextlib.suppress(OSError):
                    os.kill(int(entry), signal.SIGKILL)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"binary": " ".join(self.engine), "user": self.user, "network": "--network none",
                    "runtime": self.runtime or "the engine's default",
                    "limits": "memory, pids, cpus, tmpfs size, nofile"})
        return out


_PROBED: dict[str, tuple[bool, str]] = {}


def _engine_probe(binary: str) -> tuple[bool, str]:
    """Cached only when the engine answered: a daemon started later is still found."""
    if binary in _PROBED:
        return _PROBED[binary]
    found = _probe_once(binary)
    if found[0]:
        _PROBED[binary] = found
    return found


def _probe_once(binary: str) -> tuple[bool, str]:
    if not binary or not shutil.which(binary):
        return False, "no docker/podman CLI on PATH"
    try:
        proc = subprocess.run([binary, "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{binary} version failed: {exc}"
    if proc.returncode != 0 or not proc.stdout.strip():
        return False, f"no container engine answers ({(proc.stderr or '').strip()[:200]})"
    return True, f"{binary} engine {proc.stdout.strip()} on {socket.gethostname()}"

