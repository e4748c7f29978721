from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from palaestra.core.records import Outcome, Rollout, Verdict
from palaestra.metrics.passk import pass_at_k, pass_hat_k
from palaestra.metrics.summary import compute_metrics, format_table


def ro(task: str, repeat: int = 0, attempt: int = 0, reward: float | None = 1.0, *, env: str = "mcqa",
       model: str = "m1", agent: str = "tool", fail: str | None = None, answer: str | None = None,
       passed: bool | None = None) -> Rollout:
    if fail == "timeout":
        outcome = Outcome(status="timed_out", message="budget exceeded")
    elif fail is not None:
        outcome = Outcome.failed(fail, "boom")
    else:
        outcome = Outcome.scored()
    verdict = None if fail or reward is None else Verdict(reward=reward, answer=answer, passed=passed)
    return Rollout(rollout_id=f"{task}-{repeat}-{attempt}-{model}", task_id=task, env=env, agent=agent,
                   model=model, repeat=repeat, attempt=attempt, outcome=outcome, verdict=verdict)


def assert_fractions(block: dict[str, Any]) -> None:
    for key in ("pass_at_k", "pass_hat_k", "majority_at_k"):
        for v in (block[key] or {}).values():
            assert v is None or 0.0 <= v <= 1.0
    for key in ("coverage",):
        assert block[key] is None or 0.0 <= block[key] <= 1.0


def test_last_scored_attempt_counts_and_failures_are_not_zeros() -> None:
    rollouts = [
        ro("t1", 0, 0, fail="model"),
        ro("t1", 0, 1, reward=1.0),  # retry succeeded: the failure disappears
        ro("t1", 1, 0, reward=1.0),
        ro("t1", 1, 1, reward=0.5),  # later scored attempt wins
        ro("t1", 2, 0, reward=0.0),
        ro("t1", 2, 1, fail="judge"),  # a later failure does not erase a scored attempt
        ro("t2", 0, 0, fail="environment"),
        ro("t2", 0, 1, fail="timeout"),  # never scored: the last attempt is the failure
        ro("t2", 1, 0, reward=1.0),
    ]
    m = compute_metrics(rollouts)
    o = m["overall"]
    assert o["n_tasks"] == 2 and o["n_tasks_scored"] == 2
    assert o["n_rollouts_scored"] == 4
    assert o["n_failed"] == {"timeout": 1}
    assert o["mean_reward"] == pytest.approx((1.0 + 0.5 + 0.0 + 1.0) / 4)  # no zero for the failure
    assert o["coverage"] == pytest.approx(4 / 5)
    assert m["per_task"]["t1"] == {"n": 3, "n_failed": 0, "pass_rate": pytest.approx(1 / 3),
                                   "mean_reward": pytest.approx(0.5)}
    assert m["per_task"]["t2"]["n_failed"] == 1 and m["per_task"]["t2"]["n"] == 1
    # min n over tasks is 1 (t2), so only k=1 is reported
    assert list(o["pass_at_k"]) == ["1"]
    assert o["pass_at_k"]["1"] == pytest.approx((1 / 3 + 1.0) / 2)


def test_pass_at_k_and_pass_hat_k_are_means_over_tasks() -> None:
    rewards = {"a": [1, 0, 0, 1], "b": [0, 0, 0, 0], "c": [1, 1, 1, 0, 1]}
    rollouts = [ro(t, i, reward=float(r)) for t, rs in rewards.items() for i, r in enumerate(rs)]
    o = compute_metrics(rollouts)["overall"]
    assert list(o["pass_at_k"]) == ["1", "2", "4"]  # min n = 4
    for k in (1, 2, 4):
        want = sum(pass_at_k(len(rs), sum(rs), k) for rs in rewards.values()) / 3
        assert o["pass_at_k"][str(k)] == pytest.approx(want)
        want_hat = sum(pass_hat_k(len(rs), sum(rs), k) for rs in rewards.values()) / 3
        assert o["pass_hat_k"][str(k)] == pytest.approx(want_hat)
    lo, hi = o["reward_ci95"]
    assert lo <= o["mean_reward"] <= hi
    lo1, hi1 = o["pass_at_1_ci95"]
    assert lo1 <= o["pass_at_k"]["1"] <= hi1
    assert o["majority_at_k"] is None  # no verdict carries an answer
    assert_fractions(o)


def test_explicit_passed_flag_overrides_reward_threshold() -> None:
    rollouts = [ro("t", 0, reward=0.7, passed=True), ro("t", 1, reward=1.0, passed=False)]
    o = compute_metrics(rollouts)["overall"]
    assert o["pass_at_k"]["1"] == pytest.approx(0.5)
    assert o["mean_reward"] == pytest.approx(0.85)


def test_majority_at_k_votes_over_answers_in_repeat_order() -> None:
    rollouts = [
        # task x: B wins 2-1 over the correct A among the first 3; all four tie 2-2 and A came first
        ro("x", 3, reward=1.0, answer="A"),  # out of order on purpose: votes follow repeat order
        ro("x", 0, reward=1.0, answer="A"),
        ro("x", 1, reward=0.0, answer="B"),
        ro("x", 2, reward=0.0, answer="B"),
        # task y: always right
        *[ro("y", i, reward=1.0, answer="7") for i in range(4)],
    ]
    o = compute_metrics(rollouts)["overall"]
    assert o["majority_at_k"]["1"] == 1.0  # x: first sample is A
    assert o["majority_at_k"]["2"] == 1.0  # x: A vs B tie, A first
    assert o["majority_at_k"]["4"] == 1.0  # x: 2-2, A first
    rollouts[1] = ro("x", 0, reward=0.0, answer="B")  # now B leads everywhere for x
    o = compute_metrics(rollouts)["overall"]
    assert o["majority_at_k"] == {"1": 0.5, "2": 0.5, "4": 0.5}


def test_expected_counts_reveal_missing_tasks_and_groups_are_separate() -> None:
    rollouts = [ro("t1", i, reward=1.0, model="m1") for i in range(4)]
    rollouts += [ro("t1", i, reward=0.0, model="m2") for i in range(2)]
    expected = {("mcqa", "t1"): 4, ("mcqa", "t3"): 4}
    m = compute_metrics(rollouts, expected=expected)
    g1, g2 = m["groups"]["env=mcqa agent=tool model=m1"], m["groups"]["env=mcqa agent=tool model=m2"]
    assert g1["coverage"] == 1.0 and g1["n_expected"] == 4 and g1["mean_reward"] == 1.0
    assert g2["coverage"] == 0.5 and g2["mean_reward"] == 0.0
    o = m["overall"]
    assert o["n_expected"] == 12 and o["coverage"] == pytest.approx(6 / 12)
    assert o["n_tasks"] == 2 and o["n_tasks_scored"] == 1  # t3 never ran, but it is counted
    assert m["per_task"]["t3"] == {"n": 0, "n_failed": 0, "pass_rate": None, "mean_reward": None}
    by_model = compute_metrics(rollouts, group_by=("model",))
    assert sorted(by_model["groups"]) == ["model=m1", "model=m2"]
    assert list(compute_metrics(rollouts, group_by=())["groups"]) == ["all"]
    with pytest.raises(ValueError, match="not a Rollout field"):
        compute_metrics(rollouts, group_by=("modle",))


def test_empty_input_is_well_formed_and_json_able() -> None:
    m = compute_metrics([])
    o = m["overall"]
    assert o["n_tasks"] == 0 and o["n_rollouts_scored"] == 0 and o["n_failed"] == {}
    assert o["mean_reward"] is None and o["reward_ci95"] is None and o["coverage"] is None
    assert o["pass_at_k"] == {} and o["majority_at_k"] is None
    assert m["groups"] == {} and m["per_task"] == {} and m["invalid_records"] == []
    json.dumps(m, allow_nan=False)
    only_failures = compute_metrics([ro("t", fail="sandbox")], expected={("mcqa", "t"): 2})
    assert only_failures["overall"]["coverage"] == 0.0
    assert only_failures["overall"]["n_failed"] == {"sandbox": 1}
    assert only_failures["overall"]["mean_reward"] is None
    format_table(m)  # renders without crashing


def test_accepts_journal_dicts_and_output_is_json_able() -> None:
    rollouts = [ro(t, i, reward=float(i % 2), answer=str(i % 3)) for t in ("a", "b") for i in range(3)]
    rollouts.append(ro("b", 3, fail="verifier"))
    from_models = compute_metrics(rollouts)
    from_dicts = compute_metrics([json.loads(r.model_dump_json()) for r in rollouts])
    assert from_models == from_dicts
    text = json.dumps(from_models, allow_nan=False)
    assert json.loads(text) == from_models
    assert_fractions(from_models["overall"])


def test_format_table_shows_groups_and_ks() -> None:
    rollouts = [ro("t", i, reward=float(i % 2), model=m) for m in ("m1", "m2") for i in range(4)]
    rollouts.append(ro("u", 0, fail="model", model="m2"))
    console = Console(record=True, width=220)
    console.print(format_table(compute_metrics(rollouts)))
    text = console.export_text()
    for needle in ("overall", "model=m1", "model=m2", "pass@1", "pass@4", "pass^4", "model 1"):
        assert needle in text, needle
    assert "pass@8" not in text  # samples of two models are never pooled into one task


def test_invalid_journal_records_are_reported_not_fatal() -> None:
    good = json.loads(ro("t", 0, reward=1.0).model_dump_json())
    m = compute_metrics([good, {"rollout_id": "x", "task_id": "t"}, {"hello": 1}])
    assert m["overall"]["n_rollouts_scored"] == 1
    assert len(m["invalid_records"]) == 2
    assert m["invalid_records"][0].startswith("record 2: not a Rollout (env: Field required")


def test_shortcuts_give_the_numbers_the_full_computation_gives() -> None:
    """One group holding every unit reuses the overall block; 0/1 rewards reuse the reward interval for
    pass@1. Both must equal what computing each separately gives."""
    from palaestra.metrics.passk import cluster_bootstrap_ci, pass_at_1_ci

    rollouts = [ro(f"t{i}", r, reward=float((i * 7 + r) % 3 == 0)) for i in range(40) for r in range(2)]
    m = compute_metrics(rollouts, n_boot=500)
    o = m["overall"]
    assert m["groups"]["env=mcqa agent=tool model=m1"] == o
    order = sorted(range(40), key=lambda i: f"t{i}")  # the metrics visit tasks sorted by id
    per_task = [[float((i * 7 + r) % 3 == 0) for r in range(2)] for i in order]
    reward_ci = cluster_bootstrap_ci([sum(x) for x in per_task], [2] * 40, n_boot=500)
    p1_ci = pass_at_1_ci([(2, int(sum(x))) for x in per_task], n_boot=500)
    assert o["reward_ci95"] == pytest.approx(list(reward_ci))
    assert o["pass_at_1_ci95"] == pytest.approx(list(p1_ci))
    # graded rewards: pass@1 (reward >= 1) differs from the mean reward, so its interval is its own
    graded = compute_metrics([ro(f"t{i}", reward=(i % 4) / 3) for i in range(40)], n_boot=500)["overall"]
    assert graded["pass_at_1_ci95"] != graded["reward_ci95"]
    # a second group: the overall block is not copied into the groups
    two = compute_metrics(rollouts + [ro("t0", model="m2", reward=1.0)], n_boot=500)
    assert two["groups"]["env=mcqa agent=tool model=m2"]["n_rollouts_scored"] == 1
    assert two["overall"]["n_rollouts_scored"] == 81


def test_a_scored_record_without_a_verdict_counts_as_failed_no_verdict_as_the_report_shows_it() -> None:
    from palaestra.metrics.rows import row_from_rollout

    odd = ro("t2", reward=None)  # said scored, no verdict: no reward to count, and never a 0
    metrics = compute_metrics([ro("t1"), odd])
    assert metrics["overall"]["n_rollouts_scored"] == 1 and metrics["overall"]["mean_reward"] == 1.0
    assert metrics["overall"]["n_failed"] == {"no_verdict": 1}
    assert set(metrics["failure_examples"]) == {"no_verdict"} == {row_from_rollout(1, odd).failure_kind}
