"""Choosing the next token for every row of a batch, so that each row's choice depends only on that row.

Reproducibility under batching is the point: a seeded request must produce the same tokens alone or next
to 31 others. So each row draws its uniform number from its own ``torch.Generator``, rows are grouped only
by how they sample (greedy, plain, nucleus), and nothing reduces across rows. The recorded logprob is the
model's raw distribution (log-softmax of the logits, before temperature, top-p or a grammar mask), which is
what vLLM reports by default and what a trainer recomputes with a forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Row:
    """How one row samples. ``mask`` (bool, vocab-sized) restricts the choice; ``top_logprobs`` asks for
    the k most likely tokens of the raw distribution."""

    temperature: float
    top_p: float
    generator: torch.Generator
    mask: torch.Tensor | None = None
    top_logprobs: int = 0


@dataclass
class Choice:
    token: int
    logprob: float
    top: list[tuple[int, float]]


def _draw(rows: list[Row], idx: list[int]) -> torch.Tensor:
    return torch.cat([torch.rand(1, generator=rows[i].generator, dtype=torch.float64) for i in idx])


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index of the first entry whose running sum exceeds ``u`` times the total (rows need not be normalized)."""
    cdf = probs.double().cumsum(dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    picked = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return picked.clamp_(max=probs.shape[-1] - 1)


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Sample from the smallest set of most likely tokens whose mass reaches ``top_p`` (per row)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(dim=-1) - sorted_p  # mass strictly before each token
    sorted_p = sorted_p.masked_fill(before >= top_p.unsqueeze(-1), 0.0)
    picked = _inverse_cdf(sorted_p, u)
    return order.gather(-1, picked.unsqueeze(-1)).squeeze(-1)


def choose(logits: torch.Tensor, rows: list[Row]) -> list[Choice]:
    """One token per row of ``logits`` ([batch, vocab], any float dtype)."""
    logits = logits.float()
    raw = torch.log_softmax(logits, dim=-1)
    work = logits
    masked = [i for i, r in enumerate(rows) if r.mask is not None]
    if masked:
        work = logits.clone()
        for i in masked:
            mask = rows[i].mask
            assert mask is not None
            work[i].masked_fill_(~mask, float("-inf"))
    tokens = torch.empty(len(rows), dtype=torch.long)
    greedy = [i for i, r in enumerate(rows) if r.temperature <= 0.0 or r.top_p <= 0.0]
    if greedy:
        tokens[greedy] = work[greedy].argmax(dim=-1)
    for nucleus in (False, True):
        idx = [i for i, r in enumerate(rows)
               if r.temperature > 0.0 and r.top_p > 0.0 and (r.top_p < 1.0) == nucleus]
        if not idx:
            continue
        temps = torch.tensor([rows[i].temperature for i in idx], dtype=torch.float32).unsqueeze(-1)
        probs = torch.softmax(work[idx] / temps, dim=-1)
        u = _draw(rows, idx)
        if nucleus:
            top_p = torch.tensor([rows[i].top_p for i in idx], dtype=torch.float32)
            tokens[idx] = _nucleus(probs, top_p, u)
        else:
            tokens[idx] = _inverse_cdf(probs, u)
    chosen = raw.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).tolist()
    out = []
    for i, (token, logprob) in enumerate(zip(tokens.tolist(), chosen, strict=True)):
        top: list[tuple[int, float]] = []
        if rows[i].top_logprobs > 0:
            values, ids = raw[i].topk(rows[i].top_logprobs)
            top = list(zip(ids.tolist(), values.tolist(), strict=True))
        out.append(Choice(token, logprob, top))
    return out
