"""Pi (npm ``@mariozechner/pi-coding-agent``), over OpenAI Chat Completions.

``pi -p --no-session`` runs one task non-interactively and saves no session. Its model comes from
``$PI_CODING_AGENT_DIR/models.json`` (a private directory under the run's home): one provider,
``api: "openai-completions"``, at the endpoint, with the ``developer`` role and ``reasoning_effort`` off
(an OpenAI-compatible server need not know them). ``PI_OFFLINE=1`` stops its update check, package checks
and install telemetry; extensions, skills, prompt templates, themes and AGENTS.md discovery are off so
the run depends on nothing outside this adapter's settings.
"""

from __future__ import annotations

import json

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

PROVIDER = "palaestra"
CONFIG_DIR = ".pi-agent"


class PiAdapter(CLIAdapter):
    name = "pi"
    dialect = "chat"
    executable = "pi"
    install_paths = ("npm/node_modules/.bin/pi",)
    package = "npm @mariozechner/pi-coding-agent"
    npm_package = "@mariozechner/pi-coding-agent"
    version = "0.73.1"

    def prepare(self, ctx: LaunchContext) -> None:
        config = ctx.home / CONFIG_DIR
        config.mkdir(parents=True, exist_ok=True)
        models = {"providers": {PROVIDER: {
            "baseUrl": ctx.openai_base, "api": "openai-completions", "apiKey": ctx.api_key,
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": ctx.model, "contextWindow": 131072, "maxTokens": 8192}]}}}
        (config / "models.json").write_text(json.dumps(models), encoding="utf-8")
        (config / "settings.json").write_text(json.dumps({"enableInstallTelemetry": False}), encoding="utf-8")

    def command(self, ctx: LaunchContext) -> list[str]:
        return [ctx.executable, "-p", "--no-session", "--offline", "--provider", PROVIDER, "--model", ctx.model,
                "--no-extensions", "--no-skills", "--no-prompt-templates", "--no-themes", "--no-context-files",
                ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {"PI_CODING_AGENT_DIR": str(ctx.home / CONFIG_DIR), "PI_OFFLINE": "1",
                "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """In print mode pi writes the last assistant message's text to stdout."""
        return stdout.strip() or None
