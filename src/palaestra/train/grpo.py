"""A small GRPO update in plain PyTorch, from ``rl`` export rows (or rows of rollout-service groups).

Rows already carry what the objective needs: token ids, the loss mask, the sampling logprobs and the
group advantage, so this module only scores the sequences under the current weights. The objective is
the clipped surrogate of PPO/GRPO with token-level averaging over the batch (every generated token counts
the same, long answers are not down-weighted). The recorded sampling logprobs are the "old" policy, so
a second minibatch after an optimizer step is corrected by the ratio, and the first is exactly the policy
gradient. No KL term and no reference model: for a few steps on a CPU it would only halve the speed.

Needs torch (the ``[local]``/``[train]`` extras).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

Row = dict[str, Any]


@dataclass
class UpdateStats:
    loss: float  # mean over the minibatches
    tokens: int
    rows: int
    clipped_fraction: float
    mean_ratio: float
    max_logprob_gap: float  # |new - recorded| on the first minibatch: ~0 when sampling is on-policy


def _batch(rows: Sequence[Row], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                      torch.Tensor]:
    """Right-padded ids, attention mask, loss mask, old logprobs and advantages, all [rows, length]."""
    seqs = [list(r["prompt_ids"]) + list(r["completion_ids"]) for r in rows]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    old = torch.zeros((len(rows), width), dtype=torch.float32)
    adv = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (row, seq) in enumerate(zip(rows, seqs)):
        p, c = len(row["prompt_ids"]), len(row["completion_ids"])
        ids[i, :len(seq)] = torch.tensor(seq)
        attn[i, :len(seq)] = 1
        mask[i, p:p + c] = torch.tensor(row["completion_mask"], dtype=torch.float32)
        if row.get("completion_logprobs") is not None:
            old[i, p:p + c] = torch.tensor(row["completion_logprobs"], dtype=torch.float32)
        adv[i, :] = float(row["advantage"])
    return ids, attn, mask, old, adv


def token_logprobs(model: Any, ids: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """log p(ids[:, t] | ids[:, :t]) for t >= 1 (position 0 gets 0), [rows, length]."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1, :].float()
    picked = torch.gather(logits, -1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    lp = picked - torch.logsumexp(logits, dim=-1)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def grpo_update(model: Any, optimizer: torch.optim.Optimizer, rows: Sequence[Row], *, pad_id: int,
                clip_eps: float = 0.2, minibatches: int = 1, micro_batch: int = 8,
                max_grad_norm: float = 1.0) -> UpdateStats:
    """One pass over ``rows`` in ``minibatches`` optimizer steps (gradient accumulated over micro-batches).

    Rows with zero advantage carry no gradient and are skipped, which on a CPU is most of the saving."""
    useful = [r for r in rows if float(r["advantage"]) != 0.0 and any(r["completion_mask"])]
    if not useful:
        return UpdateStats(0.0, 0, 0, 0.0, 1.0, 0.0)
    model.train()
    total_loss, total_tokens, clipped, ratio_sum, gap = 0.0, 0, 0.0, 0.0, 0.0
    size = -(-len(useful) // max(1, minibatches))
    for m, start in enumerate(range(0, len(useful), size)):
        chunk = useful[start:start + size]
        tokens = sum(sum(r["completion_mask"]) for r in chunk)
        optimizer.zero_grad(set_to_none=True)
        for j in range(0, len(chunk), micro_batch):
            ids, attn, mask, old, adv = _batch(chunk[j:j + micro_batch], pad_id)
            new = token_logprobs(model, ids, attn)
            has_old = torch.tensor([r.get("completion_logprobs") is not None for r in chunk[j:j + micro_batch]])
            old = torch.where(has_old.unsqueeze(-1), old, new.detach())
            ratio = torch.exp(new - old)
            surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
            loss = -(surrogate * mask).sum() / tokens
            loss.backward()
            with torch.no_grad():
                total_loss += float(loss)
                clipped += float((((ratio - 1).abs() > clip_eps).float() * mask).sum())
                ratio_sum += float((ratio * mask).sum())
                if m == 0:
                    gap = max(gap, float(((new - old).abs() * mask).max()))
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        total_tokens += tokens
    model.eval()
    optimizer.zero_grad(set_to_none=True)
    return UpdateStats(total_loss / (m + 1), total_tokens, len(useful), clipped / max(total_tokens, 1),
                       ratio_sum / max(total_tokens, 1), gap)
