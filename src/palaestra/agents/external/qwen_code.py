"""Qwen Code (npm ``@qwen-code/qwen-code``, needs Node >= 22), over OpenAI Chat Completions.

A one-shot prompt (``qwen PROMPT``) runs non-interactively; ``--auth-type openai`` with
``--openai-base-url`` points its OpenAI client at the endpoint, ``--yolo`` approves every tool (the run
is already jailed) and ``--max-session-turns`` bounds it. Its home (``$QWEN_HOME``, under the run's
home) holds a settings file that turns off usage statistics, telemetry, auto-update and the update nag,
chat recording and the IDE integration; ``--bare`` skips the discovery of context files, extensions,
skills, hooks and MCP servers, so the run depends only on what this adapter says. ``-o json`` ends the
output with a result event that carries the final text.
"""

from __future__ import annotations

import json

from palaestra.agents.external.adapter import LaunchContext
from palaestra.agents.external.node24 import Node24Adapter

CONFIG_DIR = ".qwen"


class QwenCodeAdapter(Node24Adapter):
    name = "qwen-code"
    dialect = "chat"
    executable = "qwen"
    install_paths = ("node24/node_modules/.bin/qwen",)
    package = "npm @qwen-code/qwen-code"
    npm_package = "@qwen-code/qwen-code"
    version = "0.24.4"
    config_dir = CONFIG_DIR

    def settings(self, ctx: LaunchContext) -> dict[str, object]:
        return {
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False, "logPrompts": False},
            "general": {"enableAutoUpdate": False, "disableAutoUpdate": True, "disableUpdateNag": True,
                        "chatRecording": False, "checkpointing": {"enabled": False}},
            "ide": {"enabled": False},
            "security": {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": False}},
            "model": {"name": ctx.model},
        }

    def arguments(self, ctx: LaunchContext) -> list[str]:
        return ["--bare", "--auth-type", "openai", "--openai-base-url", ctx.openai_base, "--openai-api-key",
                ctx.api_key, "-m", ctx.model, "--yolo", "--chat-recording", "false", "--max-session-turns",
                str(ctx.max_steps), "-o", "json", ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {**self.node_path(), "QWEN_HOME": str(ctx.home / CONFIG_DIR), "QWEN_CODE_NO_RELAUNCH": "true",
                "QWEN_USAGE_STATISTICS_ENABLED": "false", "QWEN_DISABLE_AUTO_TITLE": "1",
                "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """``-o json`` prints the run's events as one JSON array (or one per line); the result event holds
        the final text."""
        last: str | None = None
        for event in _events(stdout):
            result = event.get("result")
            if event.get("type") == "result" and isinstance(result, str):
                last = result
        return last


def _events(stdout: str) -> list[dict[str, object]]:
    try:
        whole = json.loads(stdout)
    except ValueError:
        whole = None
    if isinstance(whole, list):
        return [e for e in whole if isinstance(e, dict)]
    out = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out
