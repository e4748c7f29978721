"""Anthropic's Claude Code (npm ``@anthropic-ai/claude-code``), over the Messages API.

``claude -p`` runs one task non-interactively; ``ANTHROPIC_BASE_URL`` points it at the endpoint.
Permission prompts are skipped because the run is jailed (``IS_SANDBOX=1`` tells it so, which it
requires before skipping them as root). Telemetry, error reporting, the auto-updater and all
nonessential traffic are off through its own variables; its small/fast side model is ours too.
"""

from __future__ import annotations

import json

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext


class ClaudeCodeAdapter(CLIAdapter):
    name = "claude-code"
    dialect = "messages"
    executable = "claude"
    install_paths = ("npm/node_modules/.bin/claude",)
    package = "npm @anthropic-ai/claude-code"
    npm_package = "@anthropic-ai/claude-code"
    version = "2.1.197"

    def command(self, ctx: LaunchContext) -> list[str]:
        return [ctx.executable, "-p", "--dangerously-skip-permissions", "--model", ctx.model,
                "--max-turns", str(ctx.max_steps), "--output-format", "json", "--", ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": ctx.base_url, "ANTHROPIC_API_KEY": ctx.api_key,
            "ANTHROPIC_SMALL_FAST_MODEL": ctx.model, "ANTHROPIC_DEFAULT_HAIKU_MODEL": ctx.model,
            "CLAUDE_CONFIG_DIR": str(ctx.home / ".claude"), "IS_SANDBOX": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_BUG_COMMAND": "1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        }

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """``--output-format json`` prints one result object; its ``result`` is the last message."""
        for line in reversed(stdout.strip().splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("result"), str) and not data.get("is_error"):
                return str(data["result"])
        return None
