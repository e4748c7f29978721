"""``apptainer`` (or ``singularity``): for clusters where Docker is not allowed but Apptainer is.

Driven through its CLI, one ``apptainer exec`` per command, on a box directory like ``local``::

    apptainer exec --containall --cleanenv --no-home --pid --ipc --net --network none \\
        --bind BOX/work:WORKDIR --bind BOX/tmp:/tmp --pwd CWD --env K=V ... IMAGE argv...

``IMAGE`` is ``SandboxSpec.image`` (a ``.sif`` file, a sandbox directory, or any URI Apptainer accepts;
nothing is fetched by Palaestra itself). ``--containall`` gives a private ``/tmp``, ``/home`` and IPC;
``--pid`` a pid namespace, so killing the ``apptainer`` process takes the whole tree down; the box's
cgroups (when writable) and dedicated uid (when the runtime is root) apply exactly as for ``local``,
because the ``apptainer`` process is started inside them. Choose the binary with
``$PALAESTRA_APPTAINER``; ``singularity`` is used when ``apptainer`` is missing.

Tested only where the binary exists (the test suite skips it otherwise).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from palaestra.sandbox.capture import Captured, decode
from palaestra.sandbox.hostbox import Command, HostSandbox
from palaestra.sandbox.hostprovider import HostProvider
from palaestra.sandbox.types import SandboxError
from palaestra.settings import machine


def apptainer_path() -> str | None:
    explicit = machine().apptainer_bin  # $PALAESTRA_APPTAINER
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("apptainer") or shutil.which("singularity")


class ApptainerSandbox(HostSandbox):
    provider_name = "apptainer"
    pid_namespace = True

    def _command(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Command:
        spec = self.spec
        image = spec.image or self.provider.image
        if not image:
            raise SandboxError("the apptainer provider needs an image (a .sif file or a sandbox directory)",
                               hint="set SandboxSpec.image, a task's metadata.image, or the provider's image")
        cmd = [self.provider.binary, "exec", "--containall", "--cleanenv", "--no-home", "--pid", "--ipc"]
        if spec.network == "none":
            cmd += ["--net", "--network", "none"]
        cmd += ["--bind", f"{self.work_dir}:{spec.workdir}", "--bind", f"{self.tmp_dir}:/tmp", "--pwd", cwd]
        for m in spec.mounts:
            cmd += ["--bind", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        for key, value in env.items():
            cmd += ["--env", f"{key}={value}"]
        cmd += [image, *argv]
        return cmd, [], {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.work_dir}

    def check_wrapper(self, cap: Captured | None) -> None:
        if cap is None:
            return
        err = decode(cap.stderr[:2000])
        if cap.returncode == 255 and "FATAL" in err and not cap.timed_out:
            raise SandboxError(f"apptainer could not start the container: {err.strip()[:500]}",
                               hint="check the image path and `apptainer exec IMAGE true` by hand")


class ApptainerProvider(HostProvider):
    name = "apptainer"
    box_class = ApptainerSandbox

    def __init__(self, *args: Any, image: str | None = None, **kwargs: Any) -> None:
        """``image``: used when a spec names none (a ``.sif`` file or a sandbox directory)."""
        self.binary = apptainer_path() or "apptainer"
        self.image = image
        super().__init__(*args, **kwargs)

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return _probe()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"binary": self.binary, "namespaces": "pid, ipc, mount (+ net with --network none)",
                    "uid": "dedicated per sandbox" if self.root_mode else "caller's uid"})
        return out


@lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    binary = apptainer_path()
    if binary is None:
        return False, "neither apptainer nor singularity is on PATH (set PALAESTRA_APPTAINER)"
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{binary} --version failed: {exc}"
    if proc.returncode != 0:
        return False, f"{binary} --version failed: {proc.stderr.strip()[:200]}"
    return True, proc.stdout.strip() or binary
