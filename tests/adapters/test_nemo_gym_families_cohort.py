"""A NeMo Gym server that grades a cohort of rollouts of one row together (``genrm_compare``: its GenRM judge
compares the row's 16 responses pairwise), driven the way NeMo Gym's collector drives it: each rollout's
seed and verify carry the row's ``_ng_task_index`` and the rollout's own ``_ng_rollout_index``, so the
server's cohort of one row fills and every rollout gets its verdict. Before, every verify answered HTTP 422
(``_ng_rollout_index is required for cohort comparison``).
"""

from __future__ import annotations

import asyncio
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
pytestmark = pytest.mark.skipif(NG.missing() is not None, reason=f"nemo-gym: {NG.missing()}")


def _servers() -> Path:
    return next(Path(NG.venv_dir()).glob("lib/python3*/site-packages/resources_servers"))


def _block(server: str) -> dict[str, Any]:
    """The server's block of its own config file, as NeMo Gym reads it."""
    import yaml

    from palaestra.adapters.nemo_gym_launch import config_path

    config = yaml.safe_load((config_path(server, None) or Path()).read_text(encoding="utf-8"))
    return next(b["resources_servers"][server] for b in config.values()
                if isinstance(b, dict) and server in (b.get("resources_servers") or {}))


def test_the_cohort_size_is_the_servers_num_rollouts_per_prompt() -> None:
    from palaestra.adapters.nemo_gym_launch import cohort_size

    want = _block("genrm_compare")["num_rollouts_per_prompt"]
    assert want > 1 and cohort_size("genrm_compare", None) == want
    assert cohort_size("mcqa", None) == 1 and cohort_size("example_session_state_mgmt", None) == 1


@pytest.mark.timeout(300)
def test_a_cohort_of_one_row_fills_and_every_rollout_gets_the_servers_verdict(tmp_path: Path) -> None:
    from palaestra.adapters.nemo_gym_launch import cohort_size
    from palaestra.orchestrator import run_eval
    from palaestra.rollout import rundir
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.journal_read import read_journal

    size = cohort_size("genrm_compare", None)
    line = (_servers() / "genrm_compare" / "data" / "example.jsonl").read_text(encoding="utf-8").splitlines()[1]
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(orjson.dumps(orjson.loads(line)) + b"\n")
    cfg = RunConfig.model_validate({"input": str(rows), "env": "nemo_gym:genrm_compare", "model": "scripted:oracle",
                                    "repeats": size, "concurrency": size, "max_attempts": 1,
                                    "out": str(tmp_path / "run"), "min_coverage": 0.0})
    asyncio.run(run_eval(cfg))
    records, _ = read_journal(tmp_path / "run" / rundir.JOURNAL, missing_ok=True)
    assert len(records) == size
    outcomes = [r.get("outcome") or {} for r in records]
    assert all(o.get("status") == "scored" for o in outcomes), outcomes[:2]
    assert sorted(int(r.get("repeat") or 0) for r in records) == list(range(size))
    rewards = {(r.get("verdict") or {}).get("reward") for r in records}
    # the scripted judge's reply is no GenRM score JSON: the server's own fallback, default_score, for all
    block = _block("genrm_compare")
    assert rewards == {float(block["default_score"])}
