"""Harnesses by name. Rows and configs name an agent; this turns the name into an instance.

An agent spec follows the plugin grammar (``palaestra.plugins.spec``): ``tool``, ``bash?max_steps=8``, or
``KIND:NAME?options`` for a plugin that takes a target (e.g. a remote agent's URL). Built-ins are named
here as ``module:attr`` strings, so naming one imports nothing until it is used; installed packages add
more through the ``palaestra.agents`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from palaestra.agents.base import Agent
from palaestra.core.errors import ConfigError
from palaestra.plugins.registry import registry as plugin_registry
from palaestra.plugins.spec import Spec, parse_spec

BUILTIN_AGENTS: dict[str, str] = {
    "tool": "palaestra.agents.tool_agent:ToolAgent",
    "single": "palaestra.agents.single_turn:SingleTurnAgent",
    "bash": "palaestra.agents.bash_agent:BashAgent",
    # External harnesses import their integrations lazily: naming them costs nothing until used.
    "codex": "palaestra.agents.external:codex_agent",
    "claude-code": "palaestra.agents.external:claude_code_agent",
    "mini-swe-agent": "palaestra.agents.external:mini_swe_agent",
    "opencode": "palaestra.agents.external:opencode_agent",
    "kilocode": "palaestra.agents.external:kilocode_agent",
    "pi": "palaestra.agents.external:pi_agent",
    "aider": "palaestra.agents.external:aider_agent",
    "hermes": "palaestra.agents.external:hermes_agent",
    "openhands": "palaestra.agents.external:openhands_agent",
    # Agent SDKs, each its own loop in-process over a loopback model endpoint (agents/sdk/; the [sdk] extra).
    "openai-agents": "palaestra.agents.sdk:openai_agents_agent",
    "smolagents": "palaestra.agents.sdk:smolagents_agent",
    "strands-agents": "palaestra.agents.sdk:strands_agent",
    "qwen-code": "palaestra.agents.external:qwen_code_agent",
    "gemini-cli": "palaestra.agents.external:gemini_cli_agent",
    "openclaw": "palaestra.agents.external:openclaw_agent",
    "terminus-2": "palaestra.agents.external:terminus_2_agent",
    "langgraph": "palaestra.agents.langgraph_agent:langgraph_agent",
    # remote:URL?token_file=PATH: a harness served by `palaestra agent serve` (agents/remote.py).
    "remote": "palaestra.agents.remote:RemoteAgent",
    # nemo-gym[:AGENT_TYPE]: NeMo Gym's own agent server running a NeMo Gym row (adapters/nemo_gym_agent.py);
    # rows whose NeMo Gym agent builds the prompt name it themselves.
    "nemo-gym": "palaestra.adapters.nemo_gym_agent:NemoGymAgent",
}

REGISTRY = plugin_registry("agents", declare=False)
REGISTRY.add_builtins(BUILTIN_AGENTS)

# Options every agent spec takes; a plugin with ``from_spec`` reads its own.
AGENT_OPTIONS: dict[str, type] = {"max_steps": int}


class _Factories(Mapping[str, Callable[..., Agent]]):
    """``AGENTS[name]`` → the factory, loaded on access (a read-only view of the registry)."""

    def __getitem__(self, name: str) -> Callable[..., Agent]:
        if REGISTRY.get(name) is None:
            raise KeyError(name)
        factory: Callable[..., Agent] = REGISTRY.load(name)
        return factory

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY.names())

    def __len__(self) -> int:
        return len(REGISTRY.names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and REGISTRY.get(name) is not None


AGENTS: Mapping[str, Callable[..., Agent]] = _Factories()


def agent_names() -> list[str]:
    """Built-in harnesses and those installed packages provide."""
    return REGISTRY.names()


def parse_agent_spec(spec: str) -> Spec:
    """Parse an agent spec; a ConfigError names the unknown agent and lists the known ones."""
    parsed = parse_spec(spec, what="agent")
    if REGISTRY.get(parsed.kind) is None:
        raise ConfigError(f"unknown agent '{parsed.kind}'", hint=f"known agents: {', '.join(agent_names())}")
    return parsed


def make_agent(name: str, *, max_steps: int = 16) -> Agent:
    """An agent for a spec. ``max_steps`` is the run's default; ``?max_steps=N`` in the spec wins."""
    spec = parse_agent_spec(name)
    factory: Any = REGISTRY.load(spec.kind)
    from_spec = getattr(factory, "from_spec", None)
    if callable(from_spec):
        agent: Agent = from_spec(spec, max_steps=max_steps)
        return agent
    if spec.name:
        raise spec.error(f"agent '{spec.kind}' takes no target after ':'", hint=f"write {spec.kind}?max_steps=N")
    opts = spec.typed(AGENT_OPTIONS)
    made: Agent = factory(max_steps=opts.get("max_steps", max_steps))
    return made
