"""mini-SWE-agent (PyPI ``mini-swe-agent``), over OpenAI Chat Completions through litellm.

It lives in a virtual environment of its own (litellm pins much of the OpenAI stack), installed by
``.ci/setup-agents.sh`` under the agents directory. ``mini -y --exit-immediately`` runs one task with
no confirmation; the setup wizard, litellm's remote cost map and mini's own retries are switched off
(retries belong to the model layer, and a jailed CLI would only wait on them).
"""

from __future__ import annotations

import json
from pathlib import Path

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext

TRAJECTORY = "mini.traj.json"


class MiniSweAgentAdapter(CLIAdapter):
    name = "mini-swe-agent"
    dialect = "chat"
    executable = "mini"
    install_paths = ("mini-swe-agent/bin/mini",)
    package = "PyPI mini-swe-agent"
    version = "2.4.6"
    venv = "mini-swe-agent"

    def command(self, ctx: LaunchContext) -> list[str]:
        settings = ["mini.yaml", f"model.model_kwargs.api_base={ctx.openai_base}", "model.cost_tracking=ignore_errors",
                    f"agent.step_limit={ctx.max_steps}", "agent.cost_limit=0"]
        argv = [ctx.executable, "-y", "--exit-immediately", "-m", f"openai/{ctx.model}", "-t", ctx.prompt,
                "-o", str(ctx.home / TRAJECTORY)]
        for setting in settings:
            argv += ["-c", setting]
        return argv

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        return {
            "OPENAI_API_KEY": ctx.api_key, "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(ctx.home / ".mini-swe-agent"), "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_TELEMETRY": "False", "TQDM_DISABLE": "1",
        }

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """mini's submission: what the command that ended the task printed after its marker line."""
        path = Path(ctx.home / TRAJECTORY)
        try:
            info = json.loads(path.read_text(encoding="utf-8")).get("info") or {}
        except (OSError, ValueError):
            return None
        submission = info.get("submission")
        return submission if isinstance(submission, str) else None
