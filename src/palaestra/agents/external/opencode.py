"""OpenCode (npm ``opencode-ai``), over OpenAI Chat Completions.

``opencode run`` runs one task non-interactively. The whole configuration comes in through
``OPENCODE_CONFIG_CONTENT``: one provider, ``@ai-sdk/openai-compatible`` (bundled in the binary, so
nothing is fetched) with its ``baseURL`` at the endpoint, and every permission allowed because the run is
already jailed. Auto-update, sharing, the models.dev catalogue fetch, LSP downloads, Claude Code
compatibility (which would read ``~/.claude``) and project config files are off through its variables,
so the run depends only on what this adapter says. KiloCode is a fork and reuses all of it
(``kilocode.py``).
"""

from __future__ import annotations

import json

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

PROVIDER = "palaestra"


class OpenCodeAdapter(CLIAdapter):
    name = "opencode"
    dialect = "chat"
    executable = "opencode"
    install_paths = ("npm/node_modules/.bin/opencode",)
    package = "npm opencode-ai"
    npm_package = "opencode-ai"
    version = "1.18.33"
    env_prefix = "OPENCODE"  # the fork's variables differ only in this prefix
    switches: tuple[str, ...] = (
        "DISABLE_AUTOUPDATE", "DISABLE_SHARE", "DISABLE_MODELS_FETCH", "DISABLE_LSP_DOWNLOAD", "DISABLE_CLAUDE_CODE",
        "DISABLE_PROJECT_CONFIG", "DISABLE_EXTERNAL_SKILLS", "DISABLE_DEFAULT_PLUGINS", "DISABLE_EMBEDDED_WEB_UI",
        "EXPERIMENTAL_DISABLE_FILEWATCHER")

    def config(self, ctx: LaunchContext) -> dict[str, object]:
        model = {"name": ctx.model, "tool_call": True, "limit": {"context": 131072, "output": 8192}}
        return {
            "provider": {PROVIDER: {"npm": "@ai-sdk/openai-compatible", "name": "Palaestra",
                                    "options": {"baseURL": ctx.openai_base, "apiKey": ctx.api_key},
                                    "models": {ctx.model: model}}},
            "model": f"{PROVIDER}/{ctx.model}", "small_model": f"{PROVIDER}/{ctx.model}",
            "autoupdate": False, "share": "disabled", "permission": {"edit": "allow", "bash": "allow",
                                                                      "webfetch": "deny"},
        }

    def command(self, ctx: LaunchContext) -> list[str]:
        # A fixed --title spares the side call that would have the model name the session; --pure loads
        # no external plugins.
        return [ctx.executable, "run", "--pure", "--title", "palaestra", "-m", f"{PROVIDER}/{ctx.model}",
                "--format", "json", "--", ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        p = self.env_prefix
        env = {f"{p}_CONFIG_CONTENT": json.dumps(self.config(ctx))}
        env.update({f"{p}_{switch}": "1" for switch in self.switches})
        return env

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """``--format json`` prints one event per line; the last ``text`` part is the final message."""
        last: str | None = None
        for line in stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            part = event.get("part") if isinstance(event, dict) else None
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                last = part["text"]
        return last
