"""The local backend as a training policy: shared in-memory weights and exact continuation.

``LocalBackend.from_model(model, tokenizer)`` serves the very ``torch.nn.Module`` being trained (every
rollout samples from the current weights, no save/reload per step). Continuation (``continue_token_ids``
/ ``continue_messages``, set by ``ContinuationBackend``) is honoured by ``LocalBackend`` itself, so every
run on the local model gets exact multi-turn ids; ``TrainableLocalBackend`` is kept as the name trainers
and examples use.

Importing this module imports torch (the ``[local]`` extra).
"""

from __future__ import annotations

from palaestra.models.local.backend import LocalBackend
from palaestra.models.local.continuation import render_text

__all__ = ["TrainableLocalBackend", "render_text"]


class TrainableLocalBackend(LocalBackend):
    """``LocalBackend`` as a training policy (``from_model`` is inherited); continuation is the base's."""
