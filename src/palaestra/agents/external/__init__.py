"""External coding-agent CLIs as harnesses: a generic runner (``ExternalCLIAgent``) and one adapter per
CLI. Each run is jailed in its own network namespace whose only way out is this rollout's model
endpoint; see ``runner.py`` for the flow and ``netns.py`` for the jail."""

from __future__ import annotations

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext
from palaestra.agents.external.claude_code import ClaudeCodeAdapter
from palaestra.agents.external.codex import CodexAdapter
from palaestra.agents.external.kilocode import KiloCodeAdapter
from palaestra.agents.external.mini_swe_agent import MiniSweAgentAdapter
from palaestra.agents.external.opencode import OpenCodeAdapter
from palaestra.agents.external.pi import PiAdapter
from palaestra.agents.external.runner import ExternalCLIAgent

ADAPTERS: dict[str, type[CLIAdapter]] = {
    "codex": CodexAdapter,
    "claude-code": ClaudeCodeAdapter,
    "mini-swe-agent": MiniSweAgentAdapter,
    "opencode": OpenCodeAdapter,
    "kilocode": KiloCodeAdapter,
    "pi": PiAdapter,
}


def codex_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(CodexAdapter(), max_steps=max_steps)


def claude_code_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(ClaudeCodeAdapter(), max_steps=max_steps)


def mini_swe_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(MiniSweAgentAdapter(), max_steps=max_steps)


def opencode_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(OpenCodeAdapter(), max_steps=max_steps)


def kilocode_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(KiloCodeAdapter(), max_steps=max_steps)


def pi_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(PiAdapter(), max_steps=max_steps)


__all__ = ["ADAPTERS", "CLIAdapter", "ClaudeCodeAdapter", "CodexAdapter", "ExternalCLIAgent", "KiloCodeAdapter",
           "LaunchContext", "MiniSweAgentAdapter", "OpenCodeAdapter", "PiAdapter", "claude_code_agent",
           "codex_agent", "kilocode_agent", "mini_swe_agent", "opencode_agent", "pi_agent"]
