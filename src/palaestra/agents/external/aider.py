"""Aider (PyPI ``aider-chat``), over OpenAI Chat Completions through litellm.

Aider has no tool calls: the model edits files by writing them out in its *edit format*, and aider applies
the edits. ``--edit-format whole`` (the file's full new text under its name) is the format every model can
follow. It lives in a virtual environment of its own (litellm and many pinned packages), installed by
``.ci/setup-agents.sh``. One ``--message`` runs one task and exits; git, the repo map, linting, tests, shell
command suggestions, URL detection, update checks and analytics are off (the run is jailed; each of them
would only wait on the network or make side calls). The workdir's files are added to the chat, so the model
sees what it edits. Aider cannot delete files or run commands in this mode: a task needing that fails.
"""

from __future__ import annotations

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

MAX_CHAT_FILES = 64  # a bigger seeded tree is left to aider's own /add (the model names what it edits)


class AiderAdapter(CLIAdapter):
    name = "aider"
    dialect = "chat"
    executable = "aider"
    install_paths = ("aider/bin/aider",)
    package = "PyPI aider-chat"
    version = "0.86.2"
    venv = "aider"

    def command(self, ctx: LaunchContext) -> list[str]:
        files = sorted(p.relative_to(ctx.workdir).as_posix() for p in ctx.workdir.rglob("*") if p.is_file())
        argv = [ctx.executable, "--model", f"openai/{ctx.model}", "--openai-api-base", ctx.openai_base,
                "--openai-api-key", ctx.api_key, "--edit-format", "whole", "--no-git", "--no-auto-commits",
                "--no-gitignore", "--map-tokens", "0", "--no-auto-lint", "--no-auto-test",
                "--no-suggest-shell-commands", "--no-detect-urls", "--no-check-update", "--no-show-release-notes",
                "--analytics-disable", "--no-show-model-warnings", "--no-stream", "--no-pretty", "--no-fancy-input",
                "--yes-always", "--disable-playwright", "--encoding", "utf-8",
                "--input-history-file", str(ctx.home / ".aider.input.history"),
                "--chat-history-file", str(ctx.home / ".aider.chat.history.md"),
                "--message", ctx.prompt]
        for rel in files[:MAX_CHAT_FILES]:
            argv += ["--file", rel]
        return argv

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {"OPENAI_API_KEY": ctx.api_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
                "AIDER_CHECK_UPDATE": "false", "AIDER_ANALYTICS": "false"}
