"""Containers for task images (``sandbox.images``), run the way their task's author meant them.

The ``docker`` provider's containers suit model-written code: a read-only root, an empty tmpfs over the
working directory, an unprivileged user. A Harbor or Terminal-Bench image is different: its ``COPY``
steps put the task's files in the working directory, its tests read and write anywhere (``/tests``,
``/logs/verifier``, the home directory), and its commands run as the image's ``USER`` (root unless said).
So these containers keep the image's root file system writable, its working directory and user, and
only add what makes them safe to run here: no network unless allowed, no new privileges, memory, pids and
CPU limits, labels the reaper knows. Everything else (the engine's global and per-container flags, exec,
files, reaping) is the engine's own provider's (``docker`` or ``podman``): this class is mixed into it."""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.providers import provider_class
from palaestra.sandbox.types import SandboxSpec

_KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


class TaskContainers:
    """Mixed into a container provider class (``DockerProvider`` or a subclass): only ``run``'s flags differ."""

    user: str
    name: str
    run_flags: Callable[[SandboxSpec], list[str]]  # the provider's own (podman: the ulimits its runtime needs)

    def _run_args(self, spec: SandboxSpec, record: dict[str, Any], image: str) -> list[str]:
        args = ["run", "-d", "--name", record["container"], "--label", f"palaestra.sandbox={record['id']}",
                "--label", f"palaestra.owner={record['owner_pid']}:{record['owner_start']}",
                "--label", f"palaestra.host={record['host']}", "--security-opt", "no-new-privileges",
                # not the spec's workdir: podman's builds leave a WORKDIR with no later step uncreated, and
                # run refuses a missing one; the environment creates it (Docker's builds always do)
                "--user", self.user, "--workdir", "/", "--entrypoint", "/bin/sh", "--pull", "never",
                "--network", "host" if spec.network == "host" else "none",
                # podman asks the runtime for more open files than this process may have: state the limit
                "--ulimit", f"nofile={spec.open_files}:{spec.open_files}", *self.run_flags(spec)]
        for key, value in spec.labels.items():
            args += ["--label", f"palaestra.label.{key}={value}"]
        if spec.memory_mb:
            args += ["--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m"]
        if spec.pids:
            args += ["--pids-limit", str(spec.pids + 4)]
        if spec.cpus:
            args += ["--cpus", str(spec.cpus)]
        return [*args, image, "-c", _KEEPALIVE]


_CLASSES: dict[str, type[Any]] = {}


def open_files_limit(wanted: int = 1 << 16) -> int:
    """As many open files as a task's programs may want (``wanted``), within this process's hard limit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)


def task_provider(engine: str, user: str = "") -> SandboxProvider:
    """A provider of task containers on ``engine`` (``docker`` or ``podman``: the registered provider
    class of that name, with its flags), running as ``user`` (the image's ``USER``; root when empty)."""
    if engine not in _CLASSES:
        base = provider_class(engine)
        _CLASSES[engine] = type(f"Task{base.__name__}", (TaskContainers, base), {})
    provider: Any = _CLASSES[engine](reap=False)  # the engine's own reaper already ran for its name
    provider.user = user or "0:0"
    assert isinstance(provider, SandboxProvider)
    return provider


def engine_command(provider: SandboxProvider) -> list[str]:
    """The CLI with the global flags a provider uses (podman's cgroup manager and runtime), for builds."""
    engine = getattr(provider, "engine", None)
    if isinstance(engine, list) and engine:
        return [str(part) for part in engine]
    return [str(getattr(provider, "binary", provider.name))]
