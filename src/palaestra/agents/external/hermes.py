"""Hermes Agent (PyPI ``hermes-agent``, Nous Research), over OpenAI Chat Completions.

It lives in a virtual environment of its own under the agents directory (``.ci/setup-agents.sh``).
``hermes -z PROMPT`` is its one-shot mode: one task, approvals bypassed, only the final text on stdout.
Its provider is ``custom`` (an OpenAI-compatible server) at ``CUSTOM_BASE_URL``; its home
(``HERMES_HOME``) is private to the run, and ``--ignore-user-config --ignore-rules`` keep it from reading
anything but this adapter's settings. The toolsets are ``terminal`` and ``file``: what a coding task needs.
"""

from __future__ import annotations

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

TOOLSETS = "terminal,file"


class HermesAdapter(CLIAdapter):
    name = "hermes"
    dialect = "chat"
    executable = "hermes"
    install_paths = ("hermes/bin/hermes",)
    package = "PyPI hermes-agent"
    version = "0.19.0"
    venv = "hermes"

    def command(self, ctx: LaunchContext) -> list[str]:
        return [ctx.executable, "-z", ctx.prompt, "--provider", "custom", "-m", ctx.model, "-t", TOOLSETS,
                "--ignore-user-config", "--ignore-rules", "--yolo"]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {"HERMES_HOME": str(ctx.home / ".hermes"), "CUSTOM_BASE_URL": ctx.openai_base,
                "OPENAI_BASE_URL": ctx.openai_base, "OPENAI_API_KEY": ctx.api_key,
                "HERMES_INFERENCE_MODEL": ctx.model, "HERMES_YOLO_MODE": "1", "HERMES_ACCEPT_HOOKS": "1"}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """In one-shot mode hermes prints only the final response text."""
        return stdout.strip() or None
