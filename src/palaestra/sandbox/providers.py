"""Provider names → classes, the shared instance per name, and the default choice.

Choice, first match wins: an explicit name (a task's ``metadata.sandbox``, ``--sandbox``), then
``$PALAESTRA_SANDBOX``, then ``local`` on Linux when bubblewrap works, else ``process`` (which warns).
``none`` is never chosen implicitly."""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any

from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.types import SandboxError

ENV_VAR = "PALAESTRA_SANDBOX"

_CLASSES: dict[str, str] = {
    "local": "palaestra.sandbox.local:LocalProvider",
    "bwrap": "palaestra.sandbox.local:LocalProvider",
    "process": "palaestra.sandbox.process:ProcessProvider",
    "none": "palaestra.sandbox.process:NoneProvider",
    "docker": "palaestra.sandbox.docker:DockerProvider",
    "podman": "palaestra.sandbox.docker:PodmanProvider",
    "apptainer": "palaestra.sandbox.apptainer:ApptainerProvider",
}
NAMES = ("local", "process", "docker", "podman", "apptainer", "none")

_instances: dict[str, SandboxProvider] = {}
_lock = threading.Lock()


def provider_class(name: str) -> type[SandboxProvider]:
    target = _CLASSES.get(name)
    if target is None:
        raise SandboxError(f"unknown sandbox provider '{name}'", hint=f"use one of: {', '.join(NAMES)}")
    module, _, cls = target.partition(":")
    klass: type[SandboxProvider] = getattr(importlib.import_module(module), cls)
    return klass


def default_provider_name() -> str:
    explicit = os.environ.get(ENV_VAR, "").strip().lower()
    if explicit:
        return explicit
    from palaestra.sandbox.local import LocalProvider

    ok, _ = LocalProvider.availability()
    return "local" if ok else "process"


def get_provider(name: str | None = None) -> SandboxProvider:
    """The shared provider for ``name`` (default: see the module doc). The first call per name runs
    the reaper. Raises SandboxError naming the fix when the provider cannot work here."""
    name = (name or default_provider_name()).strip().lower()
    if name == "bwrap":
        name = "local"
    with _lock:
        provider = _instances.get(name)
        if provider is None:
            klass = provider_class(name)
            ok, why = klass.availability()
            if not ok:
                raise SandboxError(f"sandbox provider '{name}' is not usable here: {why}",
                                   hint=f"pick another with {ENV_VAR}=local|process|docker|none")
            provider = klass()
            _instances[name] = provider
    return provider


def available_providers() -> dict[str, tuple[bool, str]]:
    """Every known provider with (usable?, reason); never raises."""
    out: dict[str, tuple[bool, str]] = {}
    for name in NAMES:
        try:
            out[name] = provider_class(name).availability()
        except Exception as exc:
            out[name] = (False, f"{type(exc).__name__}: {exc}")
    return out


def describe_all() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, (ok, why) in available_providers().items():
        if ok and name != "none":
            try:
                rows.append(get_provider(name).describe())
                continue
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
        rows.append({"provider": name, "available": ok and name == "none", "detail": why})
    return rows
