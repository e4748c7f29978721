"""The running batch's KV cache: left-padded rows that can join and leave between decode steps.

Continuous batching on top of plain transformers: every row keeps its own position ids, the cache is
left-padded to a common length, and the 2-D attention mask hides the padding. A new group is prefilled
on its own, then padded and concatenated onto the running batch; finished rows are dropped by index and
the all-padding columns they leave at the left are cut away, so one long request does not make the
others pay for its length after it ends.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def cache_kwarg(model: Any) -> str:
    """transformers 5 renamed ``past_key_values`` to ``cache``; use whichever this version's forward takes."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _out_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _layers(cache: Any) -> list[Any]:
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise RuntimeError(f"unsupported KV cache type {type(cache).__name__}: palaestra[local] needs "
                           "transformers>=5 (DynamicCache with .layers)")
    return list(layers)


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    if width == 0:
        return t
    shape = list(t.shape)
    shape[dim] = width
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class KVBatch:
    """Rows of a batch in flight: cache, mask and the next position of each row."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.kwarg = cache_kwarg(model)
        self.cache: Any = None
        self.mask = torch.zeros(0, 0, dtype=torch.long)
        self.positions: list[int] = []

    def __len__(self) -> int:
        return len(self.positions)

    @torch.inference_mode()
    def prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Run ``prompts`` (left-padded together) and return last-position logits, their cache and mask."""
        width = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        mask = torch.zeros(len(prompts), width, dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt):] = 1
        positions = (mask.cumsum(dim=-1) - 1).clamp_(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)
        return out.logits[:, -1, :], _out_cache(out), mask

    def join(self, cache: Any, mask: torch.Tensor, lengths: list[int]) -> None:
        """Append prefilled rows (whose cache holds ``lengths`` real tokens each) to the running batch."""
        if self.cache is None or not self.positions:
            self.cache, self.mask, self.positions = cache, mask, list(lengths)
            return
        width = max(self.mask.shape[1], mask.shape[1])
        grow_old, grow_new = width - self.mask.shape[1], width - mask.shape[1]
        for old, new in zip(_layers(self.cache), _layers(cache), strict=True):
            old.keys = torch.cat([_pad_left(old.keys, grow_old, 2), _pad_left(new.keys, grow_new, 2)])
            old.values = torch.cat([_pad_left(old.values, grow_old, 2), _pad_left(new.values, grow_new, 2)])
        self.mask = torch.cat([_pad_left(self.mask, grow_old, 1), _pad_left(mask, grow_new, 1)])
        self.positions += lengths

    @torch.inference_mode()
    def step(self, tokens: list[int]) -> torch.Tensor:
        """Feed one token per row; returns the next-token logits [rows, vocab]."""
        ids = torch.tensor(tokens, dtype=torch.long).unsqueeze(-1)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tokens), 1)], dim=1)
        positions = torch.tensor(self.positions, dtype=torch.long).unsqueeze(-1)
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True,
                         **{self.kwarg: self.cache})
        self.cache = _out_cache(out)
        self.positions = [p + 1 for p in self.positions]
        return out.logits[:, -1, :]

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in ``rows`` (kept in that order) and cut leading all-padding columns."""
        if len(rows) == len(self.positions):
            return
        if not rows:
            self.cache, self.mask, self.positions = None, torch.zeros(0, 0, dtype=torch.long), []
            return
        index = torch.tensor(rows, dtype=torch.long)
        self.mask = self.mask.index_select(0, index)
        used = self.mask.any(dim=0).nonzero()
        lead = int(used[0]) if len(used) else 0
        self.mask = self.mask[:, lead:]
        for layer in _layers(self.cache):
            layer.keys = layer.keys.index_select(0, index)[:, :, lead:]
            layer.values = layer.values.index_select(0, index)[:, :, lead:]
        self.positions = [self.positions[r] for r in rows]
