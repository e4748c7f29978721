"""What environments built on sandboxes share: which provider a task runs on, the labels that tie a
sandbox to its run and task, and which Python a sandboxed command can run.

Provider choice for a task: ``metadata.sandbox`` (a provider name), else ``$PALAESTRA_SANDBOX``, else
the default (``local`` where bubblewrap works, else ``process``)."""

from __future__ import annotations

import os
from typing import Any

from palaestra.core.records import Task
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.providers import get_provider


def provider_for(task: Task | None = None) -> SandboxProvider:
    name = None
    if task is not None:
        name = task.metadata.get("sandbox") or None
    return get_provider(str(name) if name else None)


def labels_for(env: str, task: Task, **extra: str) -> dict[str, str]:
    """``run_id`` comes from ``$PALAESTRA_RUN_ID`` when the orchestrator sets it."""
    labels = {"env": env, "task_id": task.id[:200]}
    run_id = os.environ.get("PALAESTRA_RUN_ID")
    if run_id:
        labels["run_id"] = run_id
    labels.update(extra)
    return labels


def python_for(provider: Any) -> str:
    """An interpreter path valid inside the provider's sandboxes (``python3`` for container images)."""
    return str(getattr(provider, "python", None) or "python3")
