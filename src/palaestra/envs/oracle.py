"""The oracle's answer book: every bundled task's reference, keyed by its prompt.

A standalone oracle model server gets requests that carry no rollout context, so it looks the answer up
by the prompt. It lives here, not in ``models/``, because building it loads environments, and models sit
below environments in the layers (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.models.scripted import reference_key


def oracle_references(env_specs: Sequence[str], tasks: Sequence[Task] = ()) -> dict[str, Any]:
    """References of the bundled tasks of the given environments, and of ``tasks`` (each with its own
    environment: a task file's rows, which a real dataset makes all different), keyed by their prompt."""
    envs = {spec: load_env(spec) for spec in dict.fromkeys([*env_specs, *(t.env for t in tasks)])}
    known = [(envs[spec], task) for spec in env_specs for task in envs[spec].examples()]
    known += [(envs[task.env], task) for task in tasks]
    refs: dict[str, Any] = {}
    for env, task in known:
        ref = env.reference(task)
        if ref is not None:
            refs[reference_key(env.prompt(task))] = ref
    return refs
