"""Harbor's Terminus-2 (PyPI ``harbor``), over OpenAI Chat Completions through Harbor's LiteLLM client.

Terminus-2 is the agent that ships in Harbor: it types keystrokes into a tmux session and reads the pane
back, one JSON answer (analysis, plan, commands, ``task_complete``) per model call. Harbor needs Python
3.12, so it lives in a virtual environment of its own under the agents directory (``.ci/setup-agents.sh``).
``terminus_main.py`` runs it with that venv's Python, handing it a Harbor ``BaseEnvironment`` whose commands
run in the jailed working directory every external CLI gets (tmux from Debian must be on ``PATH``).
litellm's remote cost map is off and tmux's socket lives in the run's home (no two rollouts share a
server).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext
from palaestra.core.errors import AgentError

MAIN = Path(__file__).with_name("terminus_main.py")
FINAL = "terminus.final.txt"
LOGS = "terminus-logs"


class Terminus2Adapter(CLIAdapter):
    name = "terminus-2"
    dialect = "chat"
    executable = "python"
    install_paths = ("terminus-2/bin/python",)
    package = "PyPI harbor (Terminus-2, Python 3.12) and tmux"
    version = "0.26.0"
    venv = "terminus-2"

    def locate(self) -> str:
        """The Harbor venv's Python (or ``$PALAESTRA_TERMINUS_2_BIN``, never a ``python`` on PATH), once tmux is
        there too: Terminus-2 cannot start without it (it would try to install it with apt, which the jail
        cannot reach)."""
        python = super().locate()
        if shutil.which("tmux") is None:
            raise AgentError(
                "agent 'terminus-2' drives a tmux session, and `tmux` is not on PATH",
                hint="install it (Debian: apt-get install tmux; bash .ci/setup-agents.sh does)",
            )
        return python

    def command(self, ctx: LaunchContext) -> list[str]:
        # -P: the script's folder (this package) is not on sys.path, only the venv's harbor
        return [
            ctx.executable,
            "-P",
            str(MAIN),
            "--base-url",
            ctx.openai_base,
            "--model",
            ctx.model,
            "--api-key",
            ctx.api_key,
            "--max-turns",
            str(ctx.max_steps),
            "--logs-dir",
            str(ctx.home / LOGS),
            "--final-file",
            str(ctx.home / FINAL),
            ctx.prompt,
        ]

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False",
            "OPENAI_API_KEY": ctx.api_key,
            "TMUX_TMPDIR": str(ctx.home / "tmp"),
            "HARBOR_TELEMETRY": "0",
            "DO_NOT_TRACK": "1",
        }

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """Terminus-2's last analysis and plan (its answers are JSON), which terminus_main.py wrote out."""
        try:
            return (ctx.home / FINAL).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None
