"""A Palaestra environment run by verifiers' own loop (classic API, verifiers 0.3: ``env.evaluate``).

verifiers samples a Palaestra scripted model served on 127.0.0.1 through its own client, runs the tool
calls through ``env_response`` (into a Palaestra ``workplace`` session), stops on a reply without tool
calls and scores with its rubric. Each reward must be the one Palaestra's own collector gives the same
policy; an environment whose verifier fails leaves verifiers' error record and no 0."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers", reason="verifiers: verifiers is not installed (pip install 'palaestra[verifiers]')")

import palaestra
from palaestra.core.errors import EnvironmentFailure
from palaestra.core.records import Task, Trajectory, Verdict
from palaestra.envs.oracle import oracle_references
from palaestra.envs.registry import load_env
from palaestra.envs.workplace.env import Workplace
from palaestra.envs.workplace.store import Office
from palaestra.models.scripted import ScriptedBackend
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy

KEY_VAR = "PALAESTRA_TEST_SCRIPTED_KEY"
HERE = Path(__file__).resolve()
ANSWER = "Done."  # the constant policy's reply: an answer without doing anything


class BrokenVerifierWorkplace(Workplace):
    """``workplace`` whose verifier has lost its backing service: an infrastructure failure."""

    name = "workplace_broken_verifier"

    def verify(self, state: Office, trajectory: Trajectory) -> Verdict:
        raise EnvironmentFailure("the grading service is unreachable")


def _tasks(n: int = 4) -> list[Task]:
    env = load_env("workplace")
    return [t for t in env.examples() if env.reference(t) is not None][:n]


async def _evaluate(vf_env: Any, policy: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    from verifiers.types import ClientConfig

    monkeypatch.setenv(KEY_VAR, "scripted")
    backend = (ScriptedBackend("oracle", references=oracle_references(["workplace"])) if policy == "oracle"
               else ScriptedBackend("constant", constant_text=ANSWER))
    with serve_app(create_model_app(ModelProxy(backend))) as url:
        client = ClientConfig(api_base_url=f"{url}/v1", api_key_var=KEY_VAR, max_retries=0)
        results = await vf_env.evaluate(client=client, model="scripted", num_examples=-1, rollouts_per_example=1,
                                        on_progress=lambda *a, **k: None)
    await vf_env.mounts.stop()
    outputs: list[dict[str, Any]] = results["outputs"]
    return outputs


def _task_id(out: dict[str, Any]) -> str:
    info = out["info"]
    return str((info if isinstance(info, dict) else json.loads(info))["palaestra_task"]["id"])


@pytest.mark.parametrize("policy", ["oracle", "constant"])
async def test_verifiers_own_loop_scores_what_palaestra_scores(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.integrations.verifiers_env import PalaestraVerifiersEnv

    tasks = _tasks()
    vf_env = PalaestraVerifiersEnv("workplace", tasks)
    outputs = await _evaluate(vf_env, policy, monkeypatch)
    model = "scripted:oracle" if policy == "oracle" else f"scripted:constant?text={ANSWER}"
    expected = {r.task_id: r.verdict.reward for r in await _collect(tasks, model)}
    assert len(outputs) == len(tasks) == len(expected)
    for out in outputs:
        assert not out.get("error"), out.get("error")
        task_id = _task_id(out)
        assert out["reward"] == pytest.approx(expected[task_id]), (task_id, out["completion"])
        roles = [m["role"] if isinstance(m, dict) else m.role for m in out["completion"]]
        if policy == "oracle":  # multi-turn: every reference call ran in the session, then the answer
            ref = load_env("workplace").reference(next(t for t in tasks if t.id == task_id))
            assert ref is not None
            assert roles.count("tool") == len(ref.tool_calls) >= 1 and roles[-1] == "assistant"
            assert out["reward"] == pytest.approx(1.0)
        else:
            assert roles == ["assistant"] and out["reward"] == 0.0


async def _collect(tasks: list[Task], model: str) -> list[Any]:
    return [r async for r in palaestra.collect(tasks, model=model)]


async def test_an_infrastructure_failure_is_verifiers_error_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.integrations.verifiers_env import PalaestraVerifiersEnv

    spec = f"{HERE}:BrokenVerifierWorkplace"
    tasks = [t.model_copy(update={"env": spec}) for t in _tasks(2)]
    outputs = await _evaluate(PalaestraVerifiersEnv(spec, tasks), "oracle", monkeypatch)
    assert len(outputs) == 2
    for out in outputs:
        assert "grading service is unreachable" in str(out.get("error")), out.get("error")
        assert math.isnan(out["reward"])
