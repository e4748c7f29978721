"""OpenClaw (npm ``openclaw``, needs Node >= 24), over OpenAI Chat Completions.

``openclaw agent exec`` runs one headless embedded agent turn, no Gateway, with a temporary state
directory it removes afterwards. ``--config`` pins the whole configuration to a file this adapter writes
in the run's home, so no ambient config takes part: one provider, ``api: "openai-completions"``, at the
endpoint (a configured ``baseUrl`` is the one origin its guarded fetch trusts), the update check on start
off and anonymous statistics off. ``CI=1`` (the runner sets it) and ``OPENCLAW_NO_AUTO_UPDATE`` stop
every automatic update request too. ``--json`` ends with an envelope whose ``final`` is the last text.
"""

from __future__ import annotations

import json

from palaestra.agents.external.adapter import LaunchContext, printed_text
from palaestra.agents.external.node24 import Node24Adapter

PROVIDER = "palaestra"
CONFIG_FILE = "openclaw.json"


class OpenClawAdapter(Node24Adapter):
    name = "openclaw"
    dialect = "chat"
    executable = "openclaw"
    install_paths = ("node24/node_modules/.bin/openclaw",)
    package = "npm openclaw"
    npm_package = "openclaw"
    version = "2026.9.6"

    def config(self, ctx: LaunchContext) -> dict[str, object]:
        model = {"id": ctx.model, "name": ctx.model, "reasoning": False, "input": ["text"],
                 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                 "contextWindow": 131072, "maxTokens": 8192,
                 "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False, "supportsStore": False}}
        return {
            "models": {"mode": "replace", "providers": {PROVIDER: {
                "baseUrl": ctx.openai_base, "apiKey": ctx.api_key, "api": "openai-completions", "models": [model]}}},
            "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{ctx.model}"}}},
            "update": {"checkOnStart": False},
            "telemetry": {"enabled": False},
        }

    def prepare(self, ctx: LaunchContext) -> None:
        (ctx.home / CONFIG_FILE).write_text(json.dumps(self.config(ctx)), encoding="utf-8")

    def arguments(self, ctx: LaunchContext) -> list[str]:
        return ["agent", "exec", "--config", str(ctx.home / CONFIG_FILE), "--cwd", str(ctx.workdir), "--model",
                f"{PROVIDER}/{ctx.model}", "--thinking", "off", "--json", "--", ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {**self.node_path(), "OPENCLAW_STATE_DIR": str(ctx.home / ".openclaw"),
                "OPENCLAW_NO_AUTO_UPDATE": "1", "DO_NOT_TRACK": "1"}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """The ``--json`` envelope's ``final``."""
        return printed_text(stdout, "final")
