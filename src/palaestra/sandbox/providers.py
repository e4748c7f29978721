"""Provider names → classes, the shared instance per name, and the default choice.

Choice, first match wins: an explicit name (a task's ``metadata.sandbox``, ``--sandbox`` or
``$PALAESTRA_SANDBOX`` as the edge read it into the run's settings), then ``local`` on Linux when
bubblewrap works, else ``process`` (which warns).
``none`` is never chosen implicitly."""

from __future__ import annotations

import threading
from typing import Any

from palaestra.core.errors import ConfigError
from palaestra.plugins.registry import registry as plugin_registry
from palaestra.plugins.spec import parse_spec
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.types import SandboxError

ENV_VAR = "PALAESTRA_SANDBOX"

_CLASSES: dict[str, str] = {
    "local": "palaestra.sandbox.local:LocalProvider",
    "bwrap": "palaestra.sandbox.local:LocalProvider",
    "process": "palaestra.sandbox.process:ProcessProvider",
    "none": "palaestra.sandbox.process:NoneProvider",
    "docker": "palaestra.sandbox.docker:DockerProvider",
    "podman": "palaestra.sandbox.podman:PodmanProvider",
    "apptainer": "palaestra.sandbox.apptainer:ApptainerProvider",
    "gvisor": "palaestra.sandbox.gvisor:GvisorProvider",
}
NAMES = ("local", "process", "docker", "podman", "gvisor", "apptainer", "none")
# Provider options in the plugin grammar: ``docker?runtime=runsc`` runs docker's containers under gVisor.
OPTIONS: dict[str, tuple[str, ...]] = {"docker": ("runtime",), "podman": ("runtime",)}

# The built-ins above are plugins of the ``sandboxes`` group; installed packages add providers (a
# SandboxProvider subclass) through the ``palaestra.sandboxes`` entry-point group.
REGISTRY = plugin_registry("sandboxes", declare=False)
REGISTRY.add_builtins(_CLASSES)


def provider_names() -> list[str]:
    """The built-in providers in their usual order, then those installed packages provide."""
    return [*NAMES, *(n for n in REGISTRY.names() if n not in _CLASSES)]

_instances: dict[str, SandboxProvider] = {}
_lock = threading.Lock()


def provider_class(name: str) -> type[SandboxProvider]:
    """The class behind a provider spec (a name in the plugin grammar; only docker and podman take an
    option, ``runtime``)."""
    try:
        spec = parse_spec(name, what="sandbox provider")
        spec.check_options(OPTIONS.get(spec.kind, ()))
    except ConfigError as exc:
        raise SandboxError(exc.message, hint=exc.hint) from None
    if spec.name or REGISTRY.get(spec.kind) is None:
        raise SandboxError(f"unknown sandbox provider '{name}'", hint=f"use one of: {', '.join(provider_names())}")
    try:
        klass: type[SandboxProvider] = REGISTRY.load(spec.kind)
    except ConfigError as exc:
        raise SandboxError(exc.message, hint=exc.hint) from None
    if not (isinstance(klass, type) and issubclass(klass, SandboxProvider)):
        raise SandboxError(f"sandbox provider plugin '{name}' is not a SandboxProvider subclass")
    return klass


def default_provider_name(preferred: str | None = None) -> str:
    """``preferred`` (the run's ``sandbox`` setting) when given, else what works on this machine."""
    explicit = (preferred or "").strip().lower()
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
                                   hint=f"pick another with --sandbox (or {ENV_VAR}) local|process|docker|none")
            options = dict(parse_spec(name, what="sandbox provider").options)
            provider = klass(**options) if options else klass()
            _instances[name] = provider
    return provider


def available_providers() -> dict[str, tuple[bool, str]]:
    """Every known provider with (usable?, reason); never raises."""
    out: dict[str, tuple[bool, str]] = {}
    for name in provider_names():
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
