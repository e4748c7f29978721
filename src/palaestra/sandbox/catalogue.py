"""Every sandbox provider a user may ask for, ours and those NeMo Gym lists, with what this machine can do
about each: ``palaestra sandbox list``.

Palaestra's own providers report their real availability probe. The others (NeMo Gym's Enroot, OpenShell,
OpenSandbox, Daytona, ECS Fargate; E2B and Modal, which users ask about too) have no Palaestra provider:
no provider code ships that has never run against its real backend. For them the row says why they cannot
run here (no package, binary missing, a hosted service this machine does not reach) and what enabling
one takes. Nothing here sends traffic anywhere: a hosted service is reported as such, not probed.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from palaestra.sandbox.providers import available_providers

# NeMo Gym's list of sandbox providers (its docs), by the name Palaestra gives each.
NEMO_GYM = ("docker", "apptainer", "enroot", "openshell", "opensandbox", "daytona", "ecs-fargate")
SPECS = {"docker-gvisor": "docker?runtime=runsc", "podman-gvisor": "podman?runtime=runsc"}


# What was found running OpenSandbox 1.1.1 here (server and SDK from PyPI, against a local dockerd): the
# server starts and answers /health, but every create fails at its first step, which copies /execd and
# /bootstrap.sh out of the execd image ("SANDBOX_EXECD_DISTRIBUTION_FAILED ... Could not find the file
# /execd"). execd is a Go daemon shipped only as that image; no package has it, and its source cannot be
# built from the registries (go 1.25 wanted, Debian 12 has 1.19; a `replace` of a sibling module keeps
# `go install` from fetching it).
_OPENSANDBOX = (
    "but no sandbox can start: every create needs the `opensandbox/execd` image (its in-sandbox Go daemon, "
    "published only on a container registry, which this machine cannot reach; no PyPI, npm or Debian "
    "package ships it, and its source needs Go 1.25 where Debian 12 has 1.19), and network policy needs "
    "its `opensandbox/egress` image too")


@dataclass(frozen=True)
class Entry:
    name: str
    available: bool
    reason: str
    palaestra: bool  # a Palaestra provider (``--sandbox NAME``), not only a catalogue entry
    nemo_gym: bool
    enable: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _external() -> list[Entry]:
    rows: list[Entry] = []
    enroot = shutil.which("enroot")
    rows.append(Entry(
        "enroot", False,
        f"binary present ({enroot}) but no Palaestra provider has run against it yet" if enroot
        else "no package: enroot is not installed (Debian has no package; NVIDIA ships .deb/.rpm releases)",
        False, True, "install NVIDIA's enroot release; meanwhile `apptainer` or `podman` run the same images"))
    sdk = _has_module("openshell")
    rows.append(Entry(
        "openshell", False,
        ("SDK installed, but its gateway installs through a script from the internet, which is unreachable "
         "here" if sdk else "no package: the `openshell` SDK is not installed, and its gateway installs "
         "through a script from the internet"),
        False, True, "pip install openshell, then install and start its gateway on a machine with internet"))
    have = [m for m in ("opensandbox", "opensandbox_server") if _has_module(m)]
    rows.append(Entry(
        "opensandbox", False,
        (f"installed ({', '.join(have)}), " if have else "the SDK and server are on PyPI, ") + _OPENSANDBOX,
        False, True, "load `opensandbox/execd` (and `opensandbox/egress` for network policy) into the engine "
        "from a machine that reaches a registry (`docker save` / `docker load`) and run `opensandbox-server` on "
        "127.0.0.1 against it; a Palaestra provider for it ships once it has run against that backend"))
    for name, module, service in (("daytona", "daytona", "Daytona's hosted service"),
                                  ("ecs-fargate", "boto3", "AWS ECS Fargate (an AWS account and region)"),
                                  ("e2b", "e2b", "E2B's hosted service"), ("modal", "modal", "Modal's hosted service")):
        pkg = "SDK installed" if _has_module(module) else f"the `{module}` package is not installed"
        rows.append(Entry(
            name, False,
            f"service unreachable: needs {service} over the internet, which Palaestra's test machines cannot "
            f"reach, so no provider ships for it ({pkg})",
            False, name in NEMO_GYM, f"pip install {module} and an account; run where the service is reachable"))
    return rows


def catalogue() -> list[Entry]:
    """Palaestra's providers (each with its probe's verdict), then the external ones."""
    rows: list[Entry] = []
    found = available_providers()
    for name, (ok, why) in found.items():
        rows.append(Entry(name, ok, why, True, name in NEMO_GYM))
        if name in ("docker", "podman"):
            rows.append(_runtime_row(name, ok, why))
    rows.append(Entry("bwrap", *found.get("local", (False, "")), True, False, "another name for `local`"))
    return [*rows, *_external()]


def _runtime_row(engine: str, ok: bool, why: str) -> Entry:
    """``docker?runtime=runsc``: the engine must run, runsc must be installed and (docker) registered."""
    name = f"{engine}-gvisor"
    if not ok:
        return Entry(name, False, f"{engine}: {why}", True, False, SPECS[name])
    if not shutil.which("runsc"):
        return Entry(name, False, "binary missing: runsc is not installed (Debian: apt-get install runsc)", True,
                     False, SPECS[name])
    from palaestra.sandbox.docker import DockerProvider
    from palaestra.sandbox.podman import PodmanProvider
    from palaestra.sandbox.registry import Registry

    klass = PodmanProvider if engine == "podman" else DockerProvider
    provider = klass(Registry(), reap=False)
    usable, detail = provider.runtime_available("runsc")
    use = f"--sandbox '{SPECS[name]}'"
    return Entry(name, usable, detail, True, False, use if usable else f"{provider.runtime_hint('runsc')}; then {use}")
