"""Both directions at once: a Palaestra environment served as an OpenEnv server (``env serve --openenv``)
and imported back through Palaestra's OpenEnv adapter, which then sees an OpenEnv MCP environment (its
tools listed on ``/mcp``, ``submit_answer`` among them). The re-imported environment must keep the
original's grading: oracle 1 and null 0 under ``env check``."""

from __future__ import annotations

from palaestra.adapters.openenv import OpenEnvEnvironment
from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.server.openenv_face import SUBMIT_TOOL


def _reimported(inner: str, name: str) -> list[Task]:
    """The inner environment's tasks, each reset by id on the face, its reference as MCP actions."""
    env = load_env(inner)
    rows = []
    for task in env.examples():
        ref = env.reference(task)
        if ref is None:
            continue
        actions = [{"tool": c.name, "arguments": c.arguments} for c in ref.tool_calls]
        actions.append({"tool": SUBMIT_TOOL, "arguments": {"answer": ref.final_answer or ""}})
        rows.append(Task(id=task.id, env=name, input=task.input,
                         metadata={"reset": {"task_id": task.id}, "reference_actions": actions}))
    return rows


class ServedMath(OpenEnvEnvironment):
    name = "openenv-face-math"
    openenv_url_env = "PALAESTRA_TEST_FACE_MATH_URL"
    openenv_token_env = "PALAESTRA_TEST_FACE_TOKEN"

    def examples(self) -> list[Task]:
        return _reimported("math", self.name)


class ServedWorkplace(OpenEnvEnvironment):
    name = "openenv-face-workplace"
    openenv_url_env = "PALAESTRA_TEST_FACE_WORKPLACE_URL"
    openenv_token_env = "PALAESTRA_TEST_FACE_TOKEN"

    def examples(self) -> list[Task]:
        return _reimported("workplace", self.name)
