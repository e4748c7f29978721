"""The network jail of external CLIs: a fresh network and PID namespace per run (``unshare``).

Inside, the only interface is a loopback of its own, where ``jail.py`` forwards one port to the model
proxy's unix socket; no other address is reachable (not even the host's 127.0.0.1). The PID namespace
means everything the CLI starts dies with it: no process outlives a rollout, even a daemonized one.
As root that takes plain ``unshare``; otherwise an unprivileged user namespace maps the caller to root.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from palaestra.core.errors import AgentError

JAIL_SCRIPT = Path(__file__).with_name("jail.py")
INNER_PORT = 8765  # each run has its own namespace, so one fixed port never collides


def unshare_argv() -> list[str]:
    """The ``unshare`` prefix: new network and PID namespaces, the child killed with ``unshare``."""
    exe = shutil.which("unshare") or "unshare"
    argv = [exe, "--net", "--pid", "--fork", "--kill-child"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


@functools.lru_cache(maxsize=1)
def isolation_problem() -> str | None:
    """Why CLIs cannot be jailed on this machine (None when they can); probed once per process."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if shutil.which("unshare") is None:
        return "the `unshare` command (util-linux) is not installed"
    try:
        done = subprocess.run([*unshare_argv(), "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`unshare` failed to run: {exc}"
    if done.returncode != 0:
        return f"`unshare --net --pid` was refused: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None


def require_isolation(agent: str) -> None:
    problem = isolation_problem()
    if problem is not None:
        raise AgentError(
            f"agent '{agent}' runs its CLI in a network namespace, and {problem}",
            hint="run as root or enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), "
            "and install util-linux",
        )


def jailed_argv(command: Sequence[str], *, uds: str, cwd: str, python: str | None = None) -> list[str]:
    """``command`` wrapped so it runs in its own namespaces with 127.0.0.1:INNER_PORT → ``uds``."""
    return [*unshare_argv(), python or sys.executable, "-I", "-S", str(JAIL_SCRIPT), "--uds", uds,
            "--port", str(INNER_PORT), "--cwd", cwd, "--", *command]
