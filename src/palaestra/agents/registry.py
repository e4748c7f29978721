"""Harnesses by name. Rows and configs name an agent; this turns the name into an instance."""

from __future__ import annotations

from collections.abc import Callable

from palaestra.agents.base import Agent
from palaestra.agents.single_turn import SingleTurnAgent
from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.errors import ConfigError

AGENTS: dict[str, Callable[..., Agent]] = {
    "tool": ToolAgent,
    "single": SingleTurnAgent,
}


def make_agent(name: str, *, max_steps: int = 16) -> Agent:
    factory = AGENTS.get(name)
    if factory is None:
        raise ConfigError(f"unknown agent '{name}'", hint=f"known agents: {', '.join(sorted(AGENTS))}")
    return factory(max_steps=max_steps)
