"""What environments built on sandboxes share: which provider a task runs on, the labels that tie a
sandbox to its run and task, and which Python a sandboxed command can run.

Provider choice for a task: ``metadata.sandbox`` (a provider name), else the environment's own
``sandbox`` argument (a name or a provider instance: ``--sandbox`` or ``$PALAESTRA_SANDBOX``, passed down
from the edge), else the machine's default
(``local`` where bubblewrap works, else ``process``)."""

from __future__ import annotations

from typing import Any

from palaestra.core.records import Task
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.providers import get_provider


def provider_for(task: Task | None = None, default: str | SandboxProvider | None = None) -> SandboxProvider:
    """The task's own ``metadata.sandbox`` first (it knows what it needs), then ``default`` (what the
    environment was built with: a provider name or an instance), then the machine's default."""
    name = None
    if task is not None:
        name = task.metadata.get("sandbox") or None
    if name:
        return get_provider(str(name))
    if isinstance(default, SandboxProvider):
        return default
    return get_provider(default or None)


def labels_for(env: str, task: Task, run_id: str | None = None, **extra: str) -> dict[str, str]:
    """``run_id``: the run the environment was built for (its ``run_id`` option), when it was."""
    labels = {"env": env, "task_id": task.id[:200]}
    if run_id:
        labels["run_id"] = run_id
    labels.update(extra)
    return labels


def python_for(provider: Any) -> str:
    """An interpreter path valid inside the provider's sandboxes (``python3`` for container images)."""
    return str(getattr(provider, "python", None) or "python3")
