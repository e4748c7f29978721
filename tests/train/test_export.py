"""``palaestra export sft|dpo|rl``: from a run directory's journal to JSONL and Parquet."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
import typer
from typer.testing import CliRunner

from palaestra.cli import train_cmds
from palaestra.core.errors import ConfigError
from palaestra.core.records import ModelCallRecord, Outcome, Rollout, Trajectory, Verdict
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.train.export import ExportOptions, export_run

FIXTURES = Path(__file__).parents[1] / "fixtures"


def cli() -> typer.Typer:
    """The root app as main.py mounts these commands."""
    root = typer.Typer()
    root.command("export")(train_cmds.export)
    root.add_typer(train_cmds.serve_app, name="serve")
    return root


def record(task: str, repeat: int, reward: float | None, *, prompt: list[int] | None = None) -> Rollout:
    messages = [{"role": "user", "content": f"q {task}"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
                {"role": "tool", "tool_call_id": "c", "content": "ok"},
                {"role": "assistant", "content": f"answer {reward}"}]
    p0 = [1, 2, 3]
    calls = [ModelCallRecord(request={"messages": messages[:1], "tools": [{"type": "function", "function": {
                 "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]},
                             response={}, status=200, prompt_token_ids=p0, generation_token_ids=[4, 5],
                             generation_logprobs=[-0.1, -0.2]),
             ModelCallRecord(request={"messages": messages[:3]}, response={}, status=200,
                             prompt_token_ids=prompt or p0 + [4, 5, 6], generation_token_ids=[7],
                             generation_logprobs=[-0.3])]
    outcome = Outcome.scored() if reward is not None else Outcome.failed("model", "503")
    return Rollout(rollout_id=f"{task}-{repeat}-{reward}", task_id=task, env="e", agent="tool", model="m",
                   repeat=repeat, outcome=outcome, verdict=Verdict(reward=reward) if reward is not None else None,
                   trajectory=Trajectory(messages=messages, model_calls=calls, final_answer=f"answer {reward}"))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    rollouts = [record("a", 0, 1.0), record("a", 1, 0.0), record("a", 2, None), record("a", 2, 0.5),
                record("b", 0, 1.0), record("b", 1, 1.0, prompt=[1, 2, 3, 4, 9, 6])]  # b/1 drifted at turn 1
    out = tmp_path / "run"
    out.mkdir()
    (out / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r.model_dump(mode="json")) + b"\n" for r in rollouts))
    return out


def test_rl_export_jsonl_has_tokens_masks_logprobs_and_group_advantages(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "rl.jsonl"
    result = CliRunner().invoke(cli(), ["export", "rl", str(run_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "token_drift_rate 0.200 (1/5 turns)" in result.output and "1 with equal rewards" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    first = rows[0]
    assert first["prompt_ids"] == [1, 2, 3] and first["completion_ids"] == [4, 5, 6, 7]
    assert first["completion_mask"] == [1, 1, 0, 1] and first["completion_logprobs"] == [-0.1, -0.2, 0.0, -0.3]
    by_task = {}
    for r in rows:
        by_task.setdefault(r["task_id"], {})[r["repeat"]] = r
    a = by_task["a"]  # rewards 1, 0, 0.5 (the failed attempt of repeat 2 is not a zero)
    assert a[0]["advantage"] == pytest.approx(1.2247, abs=1e-3) and a[2]["advantage"] == pytest.approx(0.0, abs=1e-6)
    assert [r["advantage"] for r in rows if r["task_id"] == "b"] == [0.0, 0.0, 0.0]  # flat group
    drifted = [r for r in rows if r["drifted"]]
    assert len(drifted) == 2 and all(r["drifted_turns"] == [1] for r in drifted)  # per-turn fallback
    assert [len(r["completion_ids"]) for r in drifted] == [2, 1]


def test_parquet_export_and_normalisation_option(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "rl.parquet"
    stats = export_run("rl", run_dir, out, ExportOptions(normalisation="mean", on_drift="drop"))
    table = pq.read_table(out)
    assert table.num_rows == stats.rows == 4  # b/1 dropped on drift
    assert {"prompt_ids", "completion_ids", "completion_mask", "completion_logprobs", "reward", "advantage",
            "group"} <= set(table.column_names)
    assert str(table.schema.field("drifted_turns").type) == "list<element: int64>"  # fixed, even when all empty
    adv = dict(zip(table.column("rollout_id").to_pylist(), table.column("advantage").to_pylist()))
    assert adv["a-0-1.0"] == pytest.approx(0.5) and adv["a-1-0.0"] == pytest.approx(-0.5)
    assert stats.skipped == {"outcome failed (model)": 1, "1 drifted turn(s) and on_drift='drop'": 1}


def test_sft_and_dpo_exports(run_dir: Path, tmp_path: Path) -> None:
    sft = tmp_path / "sft.parquet"
    assert export_run("sft", run_dir, sft).rows == 3
    rows = pq.read_table(sft).to_pylist()
    assert rows[0]["messages"][1]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
    assert json.loads(rows[0]["tools"])[0]["function"]["name"] == "f"  # JSON text in Parquet
    dpo = tmp_path / "dpo.jsonl"
    stats = export_run("dpo", run_dir, dpo)
    pairs = [json.loads(line) for line in dpo.read_text().splitlines()]
    assert stats.rows == 1 and stats.flat_groups == 1  # task b: both rewards 1.0, no pair
    assert (pairs[0]["chosen_reward"], pairs[0]["rejected_reward"]) == (1.0, 0.0)
    assert [m["role"] for m in pairs[0]["prompt"]] == ["user"]
    assert [m["role"] for m in pairs[0]["chosen"]] == ["assistant", "tool", "assistant"]
    all_pairs = export_run("dpo", run_dir, dpo, ExportOptions(pairs="all"))
    assert all_pairs.rows == 3


async def test_a_real_run_exports_sft_and_says_why_rl_cannot(tmp_path: Path) -> None:
    run = tmp_path / "run"
    await run_eval(RunConfig(env=f"{FIXTURES / 'counter_env.py'}:CounterEnv", model="scripted:oracle", repeats=2,
                             limit=2, out=str(run)))
    stats = export_run("sft", run, tmp_path / "sft.jsonl")
    assert stats.rows == 4 and stats.scored == 4
    with pytest.raises(ConfigError, match="token_capture none") as info:
        export_run("rl", run, tmp_path / "rl.jsonl")
    assert "--capture-tokens" in (info.value.hint or "")
    assert not (tmp_path / "rl.jsonl").exists()
    result = CliRunner().invoke(cli(), ["export", "rl", str(run), "--out", str(tmp_path / "rl.jsonl")])
    assert result.exit_code == 2 and "no rl rows from 4 rollout(s)" in result.output
    bad = CliRunner().invoke(cli(), ["export", "kto", str(run), "--out", str(tmp_path / "x.jsonl")])
    assert bad.exit_code == 2 and "unknown export kind" in bad.output
    fmt = CliRunner().invoke(cli(), ["export", "sft", str(run), "--out", str(tmp_path / "x.csv")])
    assert fmt.exit_code == 2 and "*.jsonl or *.parquet" in fmt.output


def test_rl_export_of_single_turn_rollouts_says_drift_not_checked(tmp_path: Path) -> None:
    """A run whose rollouts each made one model call checks no turn: the export says so, never "0.000"."""
    rollouts = [Rollout(rollout_id=f"s{i}", task_id="a", env="e", agent="tool", model="m", repeat=i,
                        outcome=Outcome.scored(), verdict=Verdict(reward=float(i)),
                        trajectory=Trajectory(messages=[{"role": "user", "content": "q"},
                                                        {"role": "assistant", "content": "a"}],
                                              model_calls=[ModelCallRecord(
                                                  request={"messages": [{"role": "user", "content": "q"}]},
                                                  response={}, status=200, prompt_token_ids=[1, 2],
                                                  generation_token_ids=[3, 4], generation_logprobs=[-0.1, -0.2])],
                                              final_answer="a")) for i in range(2)]
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r.model_dump(mode="json")) + b"\n" for r in rollouts))
    result = CliRunner().invoke(cli(), ["export", "rl", str(run), "--out", str(tmp_path / "rl.jsonl")])
    assert result.exit_code == 0, result.output
    assert "token_drift_rate not checked (0/0 turns)" in result.output and "0.000" not in result.output
    stats = export_run("rl", run, tmp_path / "rl2.jsonl", ExportOptions())
    assert stats.checked_turns == 0 and stats.to_dict()["token_drift_rate"] is None
