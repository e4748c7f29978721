"""OpenHands (PyPI ``openhands-sdk`` + ``openhands-tools``), over OpenAI Chat Completions through litellm.

The SDK needs Python 3.12, so it lives in a virtual environment of its own under the agents directory
(``.ci/setup-agents.sh`` builds it with pyenv's 3.12 or ``python3.12``). Its harness is the SDK's own default
coding agent, run by ``openhands_main.py`` with that venv's Python. litellm's remote cost map and the SDK's
banner are off (no traffic but the rollout's endpoint, no noise on stdout).
"""

from __future__ import annotations

from pathlib import Path

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

MAIN = Path(__file__).with_name("openhands_main.py")
FINAL = "openhands.final.txt"


class OpenHandsAdapter(CLIAdapter):
    name = "openhands"
    dialect = "chat"
    executable = "python"
    install_paths = ("openhands/bin/python",)
    package = "PyPI openhands-sdk and openhands-tools (Python 3.12)"
    version = "1.58.2"
    venv = "openhands"

    def command(self, ctx: LaunchContext) -> list[str]:
        # -P: the script's folder (this package, whose openhands.py would shadow the SDK) is not on sys.path
        return [ctx.executable, "-P", str(MAIN), "--base-url", ctx.openai_base, "--model", ctx.model, "--api-key",
                ctx.api_key, "--max-steps", str(ctx.max_steps), "--final-file", str(ctx.home / FINAL), ctx.prompt]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {"OPENHANDS_SUPPRESS_BANNER": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_TELEMETRY": "False", "OPENAI_API_KEY": ctx.api_key, "TQDM_DISABLE": "1"}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """The finish tool's message, which openhands_main.py wrote to a file of the run's home."""
        try:
            return (ctx.home / FINAL).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
