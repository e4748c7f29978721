"""Aviary environments written with Aviary's own functional API (``fenv``), for the adapter's tests of
what the package's DummyEnv cannot show: rewards over several steps, a tool that raises, a broken reset."""

from __future__ import annotations

from typing import Any

from aviary.core import DummyEnv, Message, fenv
from aviary.tools import Messages


@fenv.start()
def two_steps(word: str = "go") -> tuple[str, dict[str, Any]]:
    """Say the word twice: each right call earns 0.5, the second one ends the episode."""
    return f"Call say with the word '{word}', twice.", {"word": word, "said": 0}


@two_steps.tool()
def say(word: str, state: Any) -> str:
    """Say a word.

    Args:
        word: The word to say.
    """
    if word != state.word:
        raise ValueError(f"'{word}' is not the word")
    state.extras["said"] += 1
    state.reward = 0.5
    state.done = state.said >= 2
    return f"said {state.said} time(s)"


@fenv.start()
def broken_reset() -> tuple[str, dict[str, Any]]:
    """An environment whose reset fails: its backend is gone."""
    raise ConnectionError("backend at 127.0.0.1:9 refused the connection")


class LostBackend(DummyEnv):
    """DummyEnv whose step loses its backend: a failure of the environment, not of any tool."""

    async def step(self, action: Message) -> tuple[Messages, float, bool, bool]:
        raise RuntimeError("lost the connection to the simulator")
