"""Sandboxes for untrusted, model-written code: one interface, several providers.

    from palaestra.sandbox import SandboxSpec, get_provider

    provider = get_provider()                     # local (bubblewrap) on Linux, else process
    async with await provider.create(SandboxSpec(files={"main.py": "print(1)"})) as box:
        result = await box.exec(["python3", "main.py"], timeout=10)

Providers: ``local`` (bubblewrap), ``process`` (rlimits + Landlock + seccomp), ``docker`` / ``podman``, ``gvisor``,
``apptainer``, and ``none`` (no isolation, explicit opt-in). See README.md beside this file.
"""

from __future__ import annotations

from palaestra.sandbox.base import Sandbox, SandboxProvider
from palaestra.sandbox.providers import available_providers, default_provider_name, get_provider
from palaestra.sandbox.types import ExecResult, FailureType, Mount, SandboxError, SandboxSpec, SandboxStatus

__all__ = [
    "ExecResult",
    "FailureType",
    "Mount",
    "Sandbox",
    "SandboxError",
    "SandboxProvider",
    "SandboxSpec",
    "SandboxStatus",
    "available_providers",
    "default_provider_name",
    "get_provider",
]
