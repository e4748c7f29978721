"""Gemini CLI (npm ``@google/gemini-cli``), over Google's Gemini API (``generateContent``).

Gemini CLI speaks only the Gemini API, through Google's ``@google/genai`` SDK; it has no OpenAI mode.
``GOOGLE_GEMINI_BASE_URL`` selects its "gateway" authentication (an API key is optional) and points the
SDK at the rollout's endpoint, which answers that dialect (``gemini_wire.py``) and turns each request into
a chat call like every other CLI's. ``gemini -p PROMPT --yolo`` runs one task headless with every tool
approved (the run is already jailed). Its settings file (``~/.gemini/settings.json`` in the run's home)
turns off usage statistics, telemetry, auto-update and its notification, the IDE integration, folder
trust and checkpointing; ``--skip-trust`` trusts the temporary workspace. It runs on the same Node 24
as Qwen Code (its own engines ask for Node 20 or later). ``-o json`` prints ``{"response": ...}``.
"""

from __future__ import annotations

from palaestra.agents.external.adapter import LaunchContext, printed_text
from palaestra.agents.external.node24 import Node24Adapter

CONFIG_DIR = ".gemini"


class GeminiCLIAdapter(Node24Adapter):
    name = "gemini-cli"
    dialect = "gemini"
    executable = "gemini"
    install_paths = ("node24/node_modules/.bin/gemini",)
    package = "npm @google/gemini-cli"
    npm_package = "@google/gemini-cli"
    version = "0.61.0"
    config_dir = CONFIG_DIR

    def settings(self, ctx: LaunchContext) -> dict[str, object]:
        return {
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False, "logPrompts": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False,
                        "disableAutoUpdate": True, "disableUpdateNag": True, "checkpointing": {"enabled": False}},
            "ide": {"enabled": False},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
            "model": {"name": ctx.model},
        }

    def arguments(self, ctx: LaunchContext) -> list[str]:
        return ["-p", ctx.prompt, "-m", ctx.model, "--yolo", "--skip-trust", "-o", "json"]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {**self.node_path(), "GOOGLE_GEMINI_BASE_URL": ctx.base_url, "GEMINI_API_KEY": ctx.api_key,
                "GEMINI_CLI_NO_RELAUNCH": "true", "GEMINI_CLI_TRUST_WORKSPACE": "true"}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """``-o json`` prints one object whose ``response`` is the final text."""
        return printed_text(stdout, "response")
