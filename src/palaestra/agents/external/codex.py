"""OpenAI's Codex CLI (npm ``@openai/codex``), over the Responses API.

``codex exec`` runs one task non-interactively. A custom model provider points it at the endpoint;
approvals and Codex's own sandbox are off because the run is already jailed (Codex's sandbox needs
Landlock/seccomp privileges a jail may not grant); update checks, analytics, feedback upload, OTEL
export and plugin sync are switched off by its settings, and the jail blocks anything they miss.
"""

from __future__ import annotations

from pathlib import Path

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

LAST_MESSAGE = "codex-last-message.txt"


class CodexAdapter(CLIAdapter):
    name = "codex"
    dialect = "responses"
    executable = "codex"
    install_paths = ("npm/node_modules/.bin/codex",)
    package = "npm @openai/codex"
    npm_package = "@openai/codex"
    version = "0.171.0"

    def command(self, ctx: LaunchContext) -> list[str]:
        provider = (f'{{name="palaestra",base_url="{ctx.openai_base}",wire_api="responses",'
                    f'env_key="PALAESTRA_API_KEY",request_max_retries=0,stream_max_retries=0}}')
        settings = [
            "model_provider=palaestra", f"model_providers.palaestra={provider}",
            "check_for_update_on_startup=false", "analytics.enabled=false", "feedback.enabled=false",
            'otel.exporter="none"', 'otel.metrics_exporter="none"', "features.plugins=false",
            "features.goals=false", "history.persistence=\"none\"",
        ]
        argv = [ctx.executable, "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never",
                "--dangerously-bypass-approvals-and-sandbox", "-C", str(ctx.workdir), "-m", ctx.model,
                "-o", str(ctx.home / LAST_MESSAGE)]
        for setting in settings:
            argv += ["-c", setting]
        return [*argv, "--", ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {"CODEX_HOME": str(ctx.home / ".codex"), "PALAESTRA_API_KEY": ctx.api_key}

    def prepare(self, ctx: LaunchContext) -> None:
        (ctx.home / ".codex").mkdir(parents=True, exist_ok=True)

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        path = Path(ctx.home / LAST_MESSAGE)
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
