"""Harnesses by name. Rows and configs name an agent; this turns the name into an instance."""

from __future__ import annotations

from collections.abc import Callable

from palaestra.agents.base import Agent
from palaestra.agents.bash_agent import BashAgent
from palaestra.agents.single_turn import SingleTurnAgent
from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.errors import ConfigError


def _codex(max_steps: int = 16) -> Agent:
    from palaestra.agents.external import codex_agent

    return codex_agent(max_steps)


def _claude_code(max_steps: int = 16) -> Agent:
    from palaestra.agents.external import claude_code_agent

    return claude_code_agent(max_steps)


def _mini_swe_agent(max_steps: int = 16) -> Agent:
    from palaestra.agents.external import mini_swe_agent

    return mini_swe_agent(max_steps)


def _langgraph(max_steps: int = 16) -> Agent:
    from palaestra.agents.langgraph_agent import langgraph_agent

    return langgraph_agent(max_steps=max_steps)


# External harnesses import their integrations lazily: naming them costs nothing until used.
AGENTS: dict[str, Callable[..., Agent]] = {
    "tool": ToolAgent,
    "single": SingleTurnAgent,
    "bash": BashAgent,
    "codex": _codex,
    "claude-code": _claude_code,
    "mini-swe-agent": _mini_swe_agent,
    "langgraph": _langgraph,
}


def make_agent(name: str, *, max_steps: int = 16) -> Agent:
    factory = AGENTS.get(name)
    if factory is None:
        raise ConfigError(f"unknown agent '{name}'", hint=f"known agents: {', '.join(sorted(AGENTS))}")
    return factory(max_steps=max_steps)
