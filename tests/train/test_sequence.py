"""Sequence building, drift handling, GRPO advantages and continuation prompts, on hand-made records."""

from __future__ import annotations

import pytest

from palaestra.core.records import ModelCallRecord, Outcome, Rollout, Trajectory, Verdict
from palaestra.train.advantages import group_advantages
from palaestra.train.continuation import continued_prompt, same_message
from palaestra.train.sequence import build_samples, token_drift_rate


def call(prompt: list[int], gen: list[int], logprobs: list[float] | None = None) -> ModelCallRecord:
    return ModelCallRecord(request={"messages": []}, response={"choices": []}, status=200, prompt_token_ids=prompt,
                           generation_token_ids=gen,
                           generation_logprobs=logprobs if logprobs is not None else [-0.5] * len(gen))


def rollout(*calls: ModelCallRecord, reward: float = 1.0, task: str = "t", repeat: int = 0) -> Rollout:
    return Rollout(rollout_id=f"{task}-{repeat}", task_id=task, env="e", agent="tool", model="m", repeat=repeat,
                   outcome=Outcome.scored(), verdict=Verdict(reward=reward),
                   trajectory=Trajectory(model_calls=list(calls)))


CONTIGUOUS = (call([1, 2, 3], [10, 11, 2], [-0.1, -0.2, -0.3]), call([1, 2, 3, 10, 11, 2, 7, 8], [12, 2], [-0.4, -0.5]),
              call([1, 2, 3, 10, 11, 2, 7, 8, 12, 2, 9], [13, 2], [-0.6, -0.7]))


def test_contiguous_turns_merge_into_one_sequence_with_the_mask_on_generated_tokens() -> None:
    result = build_samples(rollout(*CONTIGUOUS))
    assert result.drifts == [] and result.checked == 2 and len(result.samples) == 1
    s = result.samples[0]
    assert s.prompt_ids == [1, 2, 3]
    assert s.input_ids == [1, 2, 3, 10, 11, 2, 7, 8, 12, 2, 9, 13, 2]
    assert s.loss_mask == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1]
    assert s.completion_logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5, 0.0, -0.6, -0.7]
    assert s.turns == [0, 1, 2] and token_drift_rate([result]) == 0.0


def test_a_drifted_turn_is_flagged_and_each_policy_keeps_samples_faithful() -> None:
    calls = list(CONTIGUOUS)
    calls[2] = call([1, 2, 3, 10, 99, 2, 7, 8, 12, 2, 9], [13, 2])  # turn 1's reply re-rendered differently
    result = build_samples(rollout(*calls))
    assert len(result.drifts) == 1
    d = result.drifts[0]
    assert (d.turn, d.position, d.expected[:2], d.found[:2]) == (2, 4, [11, 2], [99, 2])
    assert [(s.prompt_ids, s.completion_ids) for s in result.samples] == [(c.prompt_token_ids, c.generation_token_ids)
                                                                          for c in calls]
    split = build_samples(rollout(*calls), "split").samples
    assert [s.turns for s in split] == [[0, 1], [2]] and split[1].prompt_ids == calls[2].prompt_token_ids
    dropped = build_samples(rollout(*calls), "drop")
    assert dropped.samples == [] and "drifted" in (dropped.skipped or "")
    assert token_drift_rate([result, build_samples(rollout(*CONTIGUOUS))]) == pytest.approx(0.25)


def test_a_prompt_shorter_than_the_history_is_drift_too() -> None:
    result = build_samples(rollout(call([1, 2], [3, 4]), call([1, 2, 3], [5])))
    assert [(d.turn, d.position) for d in result.drifts] == [(1, 3)]


def test_calls_without_token_ids_yield_no_samples_and_say_why() -> None:
    bare = ModelCallRecord(request={}, response={"choices": []}, status=200, token_capture="none")
    result = build_samples(rollout(bare))
    assert result.samples == [] and "token_capture none" in (result.skipped or "")
    failed = ModelCallRecord(request={}, error={"kind": "model", "message": "x"}, status=502)
    assert len(build_samples(rollout(failed, CONTIGUOUS[0])).samples) == 1  # a failed call is skipped


def test_misaligned_logprobs_are_dropped_rather_than_misattributed() -> None:
    result = build_samples(rollout(call([1], [2, 3], [-0.1])))
    assert result.samples[0].completion_logprobs is None and result.samples[0].completion_mask == [1, 1]


@pytest.mark.parametrize(("norm", "expected"), [
    ("group", [1.0, -1.0, 0.0, 0.0]),
    ("mean", [0.5, -0.5, 0.0, 0.0]),
    ("rloo", [1.0, -1.0, 0.0, 0.0]),
    ("none", [1.0, 0.0, 0.5, 0.5]),
])
def test_group_advantages(norm: str, expected: list[float]) -> None:
    got = group_advantages([1.0, 0.0, 0.5, 0.5], ["a", "a", "b", "b"], norm)  # type: ignore[arg-type]
    assert got == pytest.approx(expected, abs=1e-5)


def test_batch_normalisation_uses_one_scale_and_bad_input_is_refused() -> None:
    got = group_advantages([1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], "batch")
    assert got[2:] == [0.0, 0.0] and got[0] == pytest.approx(0.5 / (3 ** 0.5 / 4) , rel=1e-4)
    with pytest.raises(ValueError, match="normalisation"):
        group_advantages([1.0], ["a"], "zscore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group key"):
        group_advantages([1.0, 2.0], ["a"])


def render(messages: list[dict[str, str]], gen: bool) -> str:
    text = "".join(f"<s>{m['role']}\n{m['content']}</s>\n" for m in messages)
    return text + ("<s>assistant\n" if gen else "")


def test_continued_prompt_appends_only_the_new_messages_after_the_exact_ids() -> None:
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
            {"role": "tool", "content": "out"}]
    encode = lambda text: [ord(c) for c in text]  # noqa: E731
    ids = continued_prompt(render, encode, msgs, [7, 7, 7], 2, ["</s>"], ended=True)
    assert ids == [7, 7, 7] + encode("\n<s>tool\nout</s>\n<s>assistant\n")
    cut = continued_prompt(render, encode, msgs, [7], 2, ["</s>"], ended=False)  # cut by a length limit
    assert cut == [7] + encode("</s>\n<s>tool\nout</s>\n<s>assistant\n")
    assert continued_prompt(render, encode, msgs, [7], 1, ["</s>"], ended=True) is None  # not after a reply
    assert continued_prompt(render, encode, msgs, [7], 3, ["</s>"], ended=True) is None  # nothing new


def test_same_message_ignores_how_an_agent_rebuilt_the_reply() -> None:
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}
    rebuilt = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {"name": "f",
                                                                                           "arguments": '{"a": 1}'}}]}
    assert same_message(reply, rebuilt)
    assert not same_message(reply, {**rebuilt, "content": "x"})
    assert not same_message({"role": "user", "content": "a"}, {"role": "user", "content": "b"})


def test_drift_summary_counts_only_rollouts_with_tokens() -> None:
    from palaestra.train.sequence import drift_summary

    calls = list(CONTIGUOUS)
    calls[1] = call([9], [2])  # drifts, and so does the turn after it
    bare = rollout(ModelCallRecord(request={}, response={"choices": []}, status=200))
    assert drift_summary([rollout(*CONTIGUOUS), rollout(*calls), bare]) == {
        "token_drift_rate": 0.5, "checked_turns": 4, "drifted_turns": 2, "rollouts_with_tokens": 2}


def test_single_turn_rollouts_report_drift_not_checked_never_zero() -> None:
    """One model call per rollout: no later turn to compare, so the rate is None ("not checked"), not 0.0."""
    import json

    from palaestra.train.sequence import drift_summary, drift_text

    single = [rollout(call([1, 2, 3], [10, 11]), repeat=i) for i in range(3)]
    assert token_drift_rate([build_samples(r) for r in single]) is None
    summary = drift_summary(single)
    assert summary["checked_turns"] == 0 and summary["rollouts_with_tokens"] == 3
    assert json.loads(json.dumps(summary))["token_drift_rate"] is None
    assert drift_text(None) == "not checked" and drift_text(0.0) == "0.000"
    # one multi-turn rollout among them: measured, and then a real 0.0
    assert drift_summary([*single, rollout(*CONTIGUOUS)])["token_drift_rate"] == 0.0
