"""External coding-agent CLIs as harnesses: a generic runner (``ExternalCLIAgent``) and one adapter per
CLI. Each run is jailed in its own network namespace whose only way out is this rollout's model
endpoint; see ``runner.py`` for the flow and ``netns.py`` for the jail."""

from __future__ import annotations

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext
from palaestra.agents.external.aider import AiderAdapter
from palaestra.agents.external.claude_code import ClaudeCodeAdapter
from palaestra.agents.external.codex import CodexAdapter
from palaestra.agents.external.gemini_cli import GeminiCLIAdapter
from palaestra.agents.external.hermes import HermesAdapter
from palaestra.agents.external.kilocode import KiloCodeAdapter
from palaestra.agents.external.mini_swe_agent import MiniSweAgentAdapter
from palaestra.agents.external.openclaw import OpenClawAdapter
from palaestra.agents.external.opencode import OpenCodeAdapter
from palaestra.agents.external.openhands import OpenHandsAdapter
from palaestra.agents.external.pi import PiAdapter
from palaestra.agents.external.qwen_code import QwenCodeAdapter
from palaestra.agents.external.runner import ExternalCLIAgent
from palaestra.agents.external.terminus import Terminus2Adapter

ADAPTERS: dict[str, type[CLIAdapter]] = {
    "codex": CodexAdapter,
    "claude-code": ClaudeCodeAdapter,
    "mini-swe-agent": MiniSweAgentAdapter,
    "opencode": OpenCodeAdapter,
    "kilocode": KiloCodeAdapter,
    "pi": PiAdapter,
    "aider": AiderAdapter,
    "hermes": HermesAdapter,
    "openhands": OpenHandsAdapter,
    "qwen-code": QwenCodeAdapter,
    "openclaw": OpenClawAdapter,
    "gemini-cli": GeminiCLIAdapter,
    "terminus-2": Terminus2Adapter,
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


def aider_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(AiderAdapter(), max_steps=max_steps)


def hermes_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(HermesAdapter(), max_steps=max_steps)


def openhands_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(OpenHandsAdapter(), max_steps=max_steps)


def qwen_code_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(QwenCodeAdapter(), max_steps=max_steps)


def openclaw_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(OpenClawAdapter(), max_steps=max_steps)


def gemini_cli_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(GeminiCLIAdapter(), max_steps=max_steps)


def terminus_2_agent(max_steps: int = 16) -> ExternalCLIAgent:
    return ExternalCLIAgent(Terminus2Adapter(), max_steps=max_steps)


__all__ = ["ADAPTERS", "AiderAdapter", "CLIAdapter", "ClaudeCodeAdapter", "CodexAdapter", "ExternalCLIAgent",
           "GeminiCLIAdapter", "HermesAdapter", "KiloCodeAdapter", "LaunchContext", "MiniSweAgentAdapter",
           "OpenClawAdapter", "OpenCodeAdapter", "OpenHandsAdapter", "PiAdapter", "QwenCodeAdapter", "Terminus2Adapter",
           "aider_agent",
           "claude_code_agent", "codex_agent", "gemini_cli_agent", "hermes_agent", "kilocode_agent",
           "mini_swe_agent", "openclaw_agent", "opencode_agent", "openhands_agent", "pi_agent", "qwen_code_agent",
           "terminus_2_agent"]
