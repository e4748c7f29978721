"""Palaestra adapters over the v1 tasksets ``vf_v1_arith`` and ``vf_v1_tools``, once for each verifiers
version: 0.3's ``verifiers.v1`` (this interpreter) and 0.4 (the side venv ``.ci/setup-verifiers.sh``
builds; ``PALAESTRA_VERIFIERS_V1_VENV`` moves it). Stdlib and Palaestra only: verifiers runs in the child."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from palaestra.adapters.verifiers_v1 import VerifiersV1Environment
from palaestra.core.records import Reference, Task, ToolCall

ENV_VAR = "PALAESTRA_VERIFIERS_V1_VENV"
INSTALLER = ".ci/setup-verifiers.sh"
VERSION = "0.4.0"


def venv_dir() -> Path:
    configured = os.environ.get(ENV_VAR, "")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "palaestra-bench" / "verifiers-0.4"


def side_python() -> str:
    return str(venv_dir() / "bin" / "python")


def missing() -> str | None:
    """Why the 0.4 side venv cannot be used, decided from files alone (no interpreter start)."""
    if not Path(side_python()).is_file():
        return f"no venv at {venv_dir()} (run `bash {INSTALLER}`, or set {ENV_VAR})"
    if not any(venv_dir().glob(f"lib/python3*/site-packages/verifiers-{VERSION}.dist-info")):
        return f"the venv at {venv_dir()} has no verifiers {VERSION} (re-run `bash {INSTALLER}`)"
    return None


class _AddReference:
    def reference(self, task: Task) -> Reference:
        """Call the toolset's add with the row's operands, then answer the sum."""
        row: dict[str, Any] = task.metadata["vf_row"]
        return Reference(tool_calls=[ToolCall(name="calc_add", arguments={"a": row["a"], "b": row["b"]})],
                         final_answer=str(task.metadata["answer"]))


class V03Arith(VerifiersV1Environment):
    name = "vf1-arith-03"
    taskset = "vf_v1_arith"


class V03Tools(_AddReference, VerifiersV1Environment):
    name = "vf1-tools-03"
    mechanism = "multi-turn"
    taskset = "vf_v1_tools"
    env_args = {"agent": {"max_turns": 3}}


class V03OneTurn(VerifiersV1Environment):
    name = "vf1-oneturn-03"
    taskset = "vf_v1_tools"
    env_args = {"agent": {"max_turns": 1}}


class V03Broken(VerifiersV1Environment):
    name = "vf1-broken-03"
    taskset = "vf_v1_arith"
    taskset_args = {"explode": True, "num_tasks": 1}


class V04Arith(V03Arith):
    name = "vf1-arith-04"
    python = side_python()


class V04Broken(V03Broken):
    name = "vf1-broken-04"
    python = side_python()


class V04Tools(V03Tools):
    name = "vf1-tools-04"
    python = side_python()


class V04OneTurn(V03OneTurn):
    name = "vf1-oneturn-04"
    python = side_python()


# verifiers' own OpenEnv taskset (shipped in verifiers.v1.tasksets): its Env steps OpenEnv as the user
class V03OpenEnv(VerifiersV1Environment):
    name = "vf1-openenv-03"
    taskset = "openenv"
    taskset_args = {"env": "echo_env"}


class V04OpenEnv(V03OpenEnv):
    name = "vf1-openenv-04"
    python = side_python()


class V03Impatient(V03Arith):
    """Every request to the child must be answered within a millisecond: loading cannot be."""

    name = "vf1-impatient-03"
    request_timeout_s = 0.001
