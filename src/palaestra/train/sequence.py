"""Token-faithful training sequences from a rollout's recorded model calls.

A trainer must see exactly the tokens the policy saw and produced. Each recorded turn holds the prompt
ids the backend used, the ids it sampled and their logprobs. In a faithful multi-turn rollout every
prompt extends the previous prompt + generation (plus the environment's tokens), so the whole rollout is
one sequence whose loss mask is 1 on sampled tokens only. When a chat template re-renders an earlier turn
differently (a tool call re-serialised, whitespace normalised, thinking stripped), the next prompt no
longer extends what the model produced: training on one merged sequence would then teach the model tokens
it never generated. That turn is flagged as drifted and the rollout falls back to samples that are each
still faithful (per turn by default), so nothing trained on is invented.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from palaestra.core.records import ModelCallRecord, Rollout

DriftPolicy = Literal["per_turn", "split", "drop"]
DRIFT_POLICIES: tuple[str, ...] = ("per_turn", "split", "drop")


@dataclass
class Turn:
    """One model call with token ids: what the model was given and what it sampled."""

    index: int  # position among the rollout's model calls
    prompt_ids: list[int]
    generation_ids: list[int]
    logprobs: list[float] | None


@dataclass
class Drift:
    """A turn whose prompt does not extend the previous prompt + generation.

    ``position`` is the first token index where they differ (or where the prompt ended too early);
    ``expected``/``found`` are a few ids from there, enough to see what the template changed."""

    turn: int
    position: int
    expected: list[int]
    found: list[int]


@dataclass
class TokenSample:
    """One training sequence: ``prompt_ids`` then ``completion_ids`` (model and environment tokens),
    with ``completion_mask`` 1 exactly on sampled tokens and the sampling logprob there (0.0 elsewhere)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    completion_mask: list[int] = field(default_factory=list)
    completion_logprobs: list[float] | None = field(default_factory=list)
    turns: list[int] = field(default_factory=list)

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def loss_mask(self) -> list[int]:
        return [0] * len(self.prompt_ids) + self.completion_mask

    def _extend(self, ids: list[int], mask: int, logprobs: list[float] | None) -> None:
        self.completion_ids += ids
        self.completion_mask += [mask] * len(ids)
        if self.completion_logprobs is not None:
            if logprobs is None and mask:
                self.completion_logprobs = None
            else:
                self.completion_logprobs += logprobs if (mask and logprobs is not None) else [0.0] * len(ids)


@dataclass
class SequenceResult:
    """The samples of one rollout and what the contiguity check found."""

    samples: list[TokenSample]
    turns: int  # model calls with token ids
    checked: int  # turns whose prefix was checked (every turn but the first)
    drifts: list[Drift]
    skipped: str | None = None  # why the rollout yields no samples (no token ids, dropped on drift, ...)

    @property
    def drifted(self) -> bool:
        return bool(self.drifts)


def turns_of(calls: list[ModelCallRecord]) -> tuple[list[Turn], str | None]:
    """The successful calls' token data, in order; (turns, reason) where reason says why there are none."""
    turns: list[Turn] = []
    without = 0
    for i, call in enumerate(calls):
        if call.error is not None or call.response is None:
            continue  # a failed call produced no tokens the policy can be trained on
        if not call.prompt_token_ids or call.generation_token_ids is None:
            without += 1
            continue
        logprobs = call.generation_logprobs
        if logprobs is not None and len(logprobs) != len(call.generation_token_ids):
            logprobs = None  # misaligned logprobs are worse than none: a trainer would misattribute them
        turns.append(Turn(i, list(call.prompt_token_ids), list(call.generation_token_ids), logprobs))
    if without:
        return [], (f"{without} model call(s) carry no token ids (token_capture none): use the local backend "
                    "or a vLLM/SGLang endpoint with --capture-tokens")
    if not turns:
        return [], "no successful model calls"
    return turns, None


def check_prefix(prefix: list[int], prompt: list[int], turn: int, show: int = 8) -> Drift | None:
    """``None`` when ``prompt`` starts with ``prefix``, else where and how it differs."""
    n = len(prefix)
    if prompt[:n] == prefix:
        return None
    pos = next((i for i, (a, b) in enumerate(zip(prefix, prompt)) if a != b), min(n, len(prompt)))
    return Drift(turn, pos, prefix[pos:pos + show], prompt[pos:pos + show])


def _start(turn: Turn) -> TokenSample:
    sample = TokenSample(prompt_ids=list(turn.prompt_ids), turns=[turn.index])
    sample._extend(turn.generation_ids, 1, turn.logprobs)
    return sample


def build_samples(rollout: Rollout, on_drift: DriftPolicy = "per_turn") -> SequenceResult:
    """Check prefix contiguity turn by turn and build the rollout's training samples.

    Without drift: one sample holding the whole conversation. With drift, by ``on_drift``: ``per_turn``
    (each turn its own prompt + generation sample), ``split`` (a new sample starts at each drifted turn,
    contiguous stretches stay merged) or ``drop`` (no samples from this rollout)."""
    if on_drift not in DRIFT_POLICIES:
        raise ValueError(f"unknown drift policy {on_drift!r}: use one of {', '.join(DRIFT_POLICIES)}")
    turns, reason = turns_of(rollout.trajectory.model_calls)
    if reason is not None:
        return SequenceResult([], 0, 0, [], skipped=reason)
    drifts: list[Drift] = []
    chains: list[list[Turn]] = [[turns[0]]]
    previous = turns[0].prompt_ids + turns[0].generation_ids
    for turn in turns[1:]:
        drift = check_prefix(previous, turn.prompt_ids, turn.index)
        if drift is None:
            chains[-1].append(turn)
        else:
            drifts.append(drift)
            chains.append([turn])
        previous = turn.prompt_ids + turn.generation_ids
    result = SequenceResult([], len(turns), len(turns) - 1, drifts)
    if drifts and on_drift == "drop":
        result.skipped = f"{len(drifts)} drifted turn(s) and on_drift='drop'"
        return result
    if drifts and on_drift == "per_turn":
        result.samples = [_start(t) for t in turns]
        return result
    for chain in chains:
        sample = _start(chain[0])
        for prev, turn in zip(chain, chain[1:]):
            seen = len(prev.prompt_ids) + len(prev.generation_ids)
            sample._extend(turn.prompt_ids[seen:], 0, None)  # environment / template tokens
            sample._extend(turn.generation_ids, 1, turn.logprobs)
            sample.turns.append(turn.index)
        result.samples.append(sample)
    return result


def token_drift_rate(results: list[SequenceResult]) -> float | None:
    """Drifted turns over checked turns (turns after the first of a rollout); None when none were checked,
    so a run of single-turn rollouts reads "not checked" rather than a drift of 0.0 that nothing measured."""
    checked = sum(r.checked for r in results)
    return sum(len(r.drifts) for r in results) / checked if checked else None


def drift_text(rate: float | None) -> str:
    """A drift rate for people: three decimals, or "not checked" when no turn could be checked."""
    return "not checked" if rate is None else f"{rate:.3f}"


def drift_summary(rollouts: list[Rollout]) -> dict[str, float | int | None]:
    """Token-fidelity figures of a run, for ``metrics.json``: how many turns could be checked for prefix
    contiguity and how many drifted (only rollouts whose model calls carry token ids count)."""
    results = [build_samples(r) for r in rollouts]
    counted = [r for r in results if r.turns]
    return {"token_drift_rate": token_drift_rate(counted), "checked_turns": sum(r.checked for r in counted),
            "drifted_turns": sum(len(r.drifts) for r in counted), "rollouts_with_tokens": len(counted)}
