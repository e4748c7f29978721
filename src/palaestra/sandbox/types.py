"""The sandbox vocabulary every provider speaks: what to create (``SandboxSpec``), what an exec gives
back (``ExecResult``), and how a sandbox reports itself (``SandboxStatus``).

Failures split in two on purpose. Whatever the *program* did (ran past its timeout, ran out of memory,
hit a pids/output/file-size limit) is data: it comes back in ``ExecResult.failure`` and an environment
may score it. Whatever the *sandbox itself* failed to do (could not start, vanished, was closed) is
raised as ``SandboxError``, an ``InfraError("sandbox")``: the rollout is ``failed(sandbox)``, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from palaestra.core.errors import InfraError

FailureType = Literal["timeout", "oom", "limit", "provider"]
Network = Literal["none", "host"]


class SandboxError(InfraError):
    """The sandbox (not the program in it) failed. ``reason`` is ``provider`` unless said otherwise."""

    def __init__(self, message: str, *, hint: str | None = None, reason: FailureType = "provider") -> None:
        super().__init__("sandbox", message, hint=hint)
        self.reason: FailureType = reason


@dataclass(frozen=True)
class Mount:
    """An extra host path made visible inside the sandbox (read-only unless ``writable``)."""

    source: str
    target: str
    writable: bool = False


@dataclass
class SandboxSpec:
    """What to create. Limits of ``None`` mean "not limited"; defaults are modest on purpose, because
    the code that runs here was written by a model.

    ``image`` names a container image (docker, podman, apptainer); ``rootfs`` a directory to use as the
    root filesystem (local). Without either, local/process sandboxes see the host's ``/usr`` and
    ``/etc`` read-only. ``files`` are seeded into ``workdir`` (relative paths) before the first exec.
    ``labels`` carry the run and rollout ids (``run_id``, ``rollout_id``) so a leftover can be traced.
    ``keep_background``: what an exec starts in the background outlives the exec, until the sandbox
    closes (container providers only). By default everything an exec started dies with it; a task whose
    agent starts a server that its tests then probe needs it kept, as Harbor keeps it (its agent types into
    tmux). A timed-out exec still takes every process of the sandbox with it.
    """

    image: str | None = None
    rootfs: str | None = None
    workdir: str = "/workspace"
    files: Mapping[str, bytes | str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_mb: int | None = 512
    pids: int | None = 128
    disk_mb: int | None = 256
    cpu_time_s: int | None = None
    open_files: int = 256
    network: Network = "none"
    lifetime_s: float | None = 3600.0
    labels: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    output_cap_bytes: int = 1 << 20
    output_kill_bytes: int = 32 << 20
    keep_background: bool = False

    def __post_init__(self) -> None:
        if not self.workdir.startswith("/") or ".." in self.workdir.split("/"):
            raise ValueError(f"SandboxSpec.workdir must be an absolute path without '..', got {self.workdir!r}")
        if self.network not in ("none", "host"):
            raise ValueError(f"SandboxSpec.network must be 'none' or 'host', got {self.network!r}")
        for name in ("memory_mb", "pids", "disk_mb", "cpu_time_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"SandboxSpec.{name} must be positive or None, got {value!r}")


@dataclass
class ExecResult:
    """One command's outcome. ``exit_code`` follows the shell: 128+N when killed by signal N.

    ``stdout``/``stderr`` hold at most ``output_cap_bytes`` each (decoded as UTF-8 with replacement);
    the ``*_truncated`` flags say when more was produced. ``failure`` is set when the program was
    stopped by the sandbox: ``timeout``, ``oom`` or ``limit`` (pids, output, file size, CPU time).
    """

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0
    failure: FailureType | None = None
    detail: str = ""
    signal: int | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.failure is None

    def summary(self, limit: int = 4000) -> str:
        """A compact text for a model or a log: exit status, failure, then the (capped) output."""
        head = f"exit code {self.exit_code}"
        if self.failure:
            head += f" ({self.failure}{': ' + self.detail if self.detail else ''})"
        parts = [head]
        for label, text, cut in (("stdout", self.stdout, self.stdout_truncated),
                                 ("stderr", self.stderr, self.stderr_truncated)):
            if text or cut:
                shown = text if len(text) <= limit else text[:limit]
                more = " [truncated]" if cut or len(text) > limit else ""
                parts.append(f"--- {label}{more} ---\n{shown}")
        return "\n".join(parts)


@dataclass
class SandboxStatus:
    """What ``status()`` reports; ``state`` is ``running``, ``closed``, ``expired`` or ``lost``."""

    id: str
    provider: str
    state: str
    created: float
    age_s: float
    execs: int = 0
    uid: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    detail: str = ""


def as_bytes(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def merge_env(base: Mapping[str, str], *extra: Mapping[str, str] | None) -> dict[str, str]:
    out = dict(base)
    for more in extra:
        if more:
            for key, value in more.items():
                if not key or "=" in key or "\0" in key or "\0" in str(value):
                    raise ValueError(f"invalid environment variable {key!r} for a sandbox")
                out[str(key)] = str(value)
    return out
