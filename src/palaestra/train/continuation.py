"""Exact continuation across turns, for trainers: the names this module always exported.

The pieces live where the layers need them: ``ContinuationBackend`` and ``same_message`` in
``palaestra.server.continuation`` (every run wraps a backend that honours continuation, not only
training), ``continued_prompt`` and the two request fields in ``palaestra.models.local.continuation``
(the local backend builds continued prompts itself).
"""

from __future__ import annotations

from palaestra.models.local.continuation import CONTINUE_IDS, CONTINUE_MESSAGES, continued_prompt
from palaestra.server.continuation import ContinuationBackend, same_message, with_continuation

__all__ = ["CONTINUE_IDS", "CONTINUE_MESSAGES", "ContinuationBackend", "continued_prompt", "same_message",
           "with_continuation"]
