"""Families without a native environment, graded by NeMo Gym's own resources servers (``nemo_gym:<server>``),
one of each shape, through the real server in NeMo Gym's venv on 127.0.0.1:

- judge-backed (``abstention``): its verify calls the model server its YAML names; the launcher resolves
  that name to a Palaestra model server on 127.0.0.1, so the verdict follows what that judge answers;
- extra dependency (``ruler2``: ``editdistance``, installed by ``.ci/setup-nemo-gym.sh`` from its requirements);
- gymnasium-style state (``blackjack``: ``/reset`` deals a hand per session, ``/step`` plays the reply);
- routing: a row whose ``agent_ref`` names such a family loads to ``nemo_gym:<server>`` and scores end to end.
"""

from __future__ import annotations

import asyncio
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from palaestra.core.records import Task, Trajectory, Verdict

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
pytestmark = pytest.mark.skipif(NG.missing() is not None, reason=f"nemo-gym: {NG.missing()}")


def _example_rows(server: str, n: int, path: Path) -> Path:
    """The first ``n`` rows of the server's published example file, copied as they are to ``path``."""
    source = next(Path(NG.venv_dir()).glob(f"lib/python3*/site-packages/resources_servers/{server}/data/example.jsonl"))
    rows = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def _reply(env: Any, task: Task, text: str) -> Trajectory:
    return Trajectory(messages=[*env.prompt(task), {"role": "assistant", "content": text}])


def _verdicts(env: Any, task: Task, replies: list[str]) -> list[Verdict]:
    """Each reply graded in its own fresh session of the real server; the server is stopped afterwards."""

    async def run() -> list[Verdict]:
        out = []
        for text in replies:
            state = await env.seed(task)
            try:
                out.append(await env.verify(state, _reply(env, task, text)))
            finally:
                await env.close(state)
        return out

    try:
        return asyncio.run(run())
    finally:
        env._process.close()
        env._judge_servers.close()


@pytest.mark.timeout(300)
def test_a_judge_backed_server_asks_the_palaestra_model_its_config_names() -> None:
    from palaestra.envs.registry import load_env_class

    cls = load_env_class("nemo_gym:abstention")
    task = cls().examples()[0]
    answer = str(task.metadata["answer"])
    # abstention's judge answers a letter: A correct, B incorrect. The scripted judge says which.
    right = _verdicts(cls(judge="scripted:constant?text=A"), task, [answer])[0]
    wrong = _verdicts(cls(judge="scripted:constant?text=B"), task, [answer])[0]
    assert right.metadata["judge_output"] == "A" and right.metadata["verdict"] == "correct" and right.reward == 1.0
    assert wrong.metadata["judge_output"] == "B" and wrong.metadata["verdict"] == "incorrect" and wrong.reward < 1.0
    assert right.metadata["nemo_gym_model"] == "scripted:constant?text=A"


@pytest.mark.timeout(300)
def test_a_server_with_its_own_requirements_starts_and_grades() -> None:
    """ruler2 imports ``editdistance`` (from its requirements.txt, not NeMo Gym's): the row's own expected
    answer passes its verify, a reply without it does not."""
    from palaestra.envs.registry import load_env_class

    env = load_env_class("nemo_gym:ruler2")()
    task = env.examples()[0]
    reference = env.reference(task)
    assert reference is not None and reference.final_answer
    wrong, right = _verdicts(env, task, ["I could not find it.", reference.final_answer])
    assert wrong.metadata["nemo_gym_server"] == "ruler2" and wrong.metadata["nemo_gym_model"] is None
    assert wrong.reward == 0.0 and right.reward == 1.0


@pytest.mark.timeout(300)
def test_a_gymnasium_server_keeps_an_episode_per_session_and_steps_the_reply() -> None:
    from palaestra.envs.registry import load_env_class

    env = load_env_class("nemo_gym:blackjack")()
    task = env.examples()[0]
    verdicts = _verdicts(env, task, ["<action>stand</action>", "<action>stand</action>"])
    for v in verdicts:  # standing ends the hand: the reward is the game's, consistent with its own report
        assert v.metadata["terminated"] is True
        info = v.metadata["info"]
        assert v.reward == {"win": 1.0, "draw": 0.0, "loss": -1.0}[info["result"]]
        assert (info["player_value"] > info["dealer_value"] or info["dealer_value"] > 21) == (v.reward == 1.0)


@pytest.mark.timeout(300)
async def test_agent_ref_routes_a_family_without_native_env_to_nemo_gyms_server(tmp_path: Path) -> None:
    from palaestra.orchestrator import run_eval
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.journal_read import read_journal
    from palaestra.rollout.tasks import load_task_file

    path = _example_rows("abstention", 2, tmp_path / "rows.jsonl")
    loaded = load_task_file(path)  # no --env: the agent_ref names abstention
    assert not loaded.problems and {t.env for t in loaded.tasks} == {"nemo_gym:abstention"}
    out = tmp_path / "run"
    await run_eval(RunConfig(input=str(path), model="scripted:oracle", out=str(out), max_attempts=1,
                             judge_model="scripted:constant?text=A"))
    records, _ = read_journal(out / "rollouts.jsonl")
    assert len(records) == 2 and all(r["outcome"]["status"] == "scored" for r in records), records
    for r in records:  # the oracle replies with the row's answer; the judge (A) calls it correct
        assert r["verdict"]["reward"] == 1.0 and r["verdict"]["metadata"]["verdict"] == "correct"
        assert r["trajectory"]["messages"][-1]["content"] == r["verdict"]["metadata"]["ground_truth"]
