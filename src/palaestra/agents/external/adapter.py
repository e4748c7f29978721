"""What one coding-agent CLI needs to say to the generic runner: how to find it, its dialect, its command
line and environment for a run, and (optionally) where it left its final message.

Executables are looked up in this order: ``$PALAESTRA_<NAME>_BIN``; the agents directory
(``$PALAESTRA_AGENTS_DIR``, default ``/opt/palaestra-agents``, where ``.ci/setup-agents.sh`` installs
npm packages under ``npm/`` and PyPI ones in their own virtual environments); then ``$PATH``.
"""

from __future__ import annotations

import abc
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from palaestra.core.errors import AgentError
from palaestra.server.model_proxy import Api

DEFAULT_AGENTS_DIR = "/opt/palaestra-agents"
SETUP_HINT = "install it with `bash .ci/setup-agents.sh` (npm and PyPI), or point {var} at the executable"


def agents_dir() -> Path:
    from palaestra.settings import machine

    return Path(machine().agents_dir or DEFAULT_AGENTS_DIR)  # $PALAESTRA_AGENTS_DIR


def printed_text(stdout: str, key: str) -> str | None:
    """The text under ``key`` of the one JSON object a CLI printed (after any lines of its own before it),
    None when there is none: how CLIs with a ``--json``-style output give their final message."""
    start = stdout.find("{")
    try:
        printed = json.loads(stdout[start:]) if start >= 0 else None
    except ValueError:
        return None
    text = printed.get(key) if isinstance(printed, dict) else None
    return text if isinstance(text, str) else None


@dataclass
class LaunchContext:
    """One run of a CLI. ``base_url`` is the model endpoint as the CLI sees it from inside its
    namespace, without the ``/v1`` suffix (adapters add what their SDK expects)."""

    workdir: Path
    home: Path
    base_url: str
    prompt: str
    model: str
    max_steps: int
    executable: str
    api_key: str = "palaestra-no-key"  # the proxy needs none; CLIs refuse to start without one
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def openai_base(self) -> str:
        return self.base_url + "/v1"


class CLIAdapter(abc.ABC):
    """One coding-agent CLI. Subclasses set ``name``, ``dialect``, ``executable`` and the places under the
    agents directory where it is installed, and build the command line."""

    name: str = ""
    dialect: Api | Literal["gemini"] = "chat"  # "gemini": Google's generateContent (gemini_wire.py)
    executable: str = ""
    install_paths: tuple[str, ...] = ()  # relative to the agents directory
    package: str = ""  # what to install, for error messages
    version: str = ""  # the pinned version .ci/setup-agents.sh installs
    npm_package: str = ""  # its npm name, when it comes from npm (where its installed version is read)
    npm_prefix: str = "npm"  # the npm prefix under the agents directory that holds it
    venv: str = ""  # when it comes from PyPI: its virtual environment under the agents directory

    @property
    def env_var(self) -> str:
        return "PALAESTRA_" + self.name.upper().replace("-", "_") + "_BIN"

    def locate(self) -> str:
        """The executable's path, or an AgentError saying how to install it."""
        from palaestra.settings import machine

        override = machine().agent_bins.get(self.env_var)
        if override:
            if not os.access(override, os.X_OK):
                raise AgentError(f"{self.env_var}={override} is not an executable file",
                                 hint=f"point {self.env_var} at the {self.package} executable")
            return override
        base = agents_dir()
        for rel in self.install_paths:
            candidate = base / rel
            if os.access(candidate, os.X_OK) and candidate.is_file():
                return str(candidate)
        # a harness run by its own venv's interpreter (OpenHands, Terminus-2) is never a `python` on PATH:
        # that one holds no harness, and `agent list` would call it installed
        found = None if self.executable == "python" else shutil.which(self.executable)
        if found:
            return found
        raise AgentError(f"agent '{self.name}' needs the `{self.executable}` CLI ({self.package}), which is not "
                         f"installed (looked in ${self.env_var}, {base} and $PATH)",
                         hint=SETUP_HINT.format(var=self.env_var))

    def installed_version(self) -> str | None:
        """The version installed under the agents directory, None when unknown: for a PyPI harness what
        .ci/setup-agents.sh recorded once its venv was finished, for an npm one its package.json."""
        if self.venv:
            marker = agents_dir() / self.venv / ".palaestra-version"
            try:
                return marker.read_text(encoding="utf-8").strip() or None
            except OSError:
                return None
        if not self.npm_package:
            return None
        try:
            manifest = agents_dir() / self.npm_prefix / "node_modules" / self.npm_package / "package.json"
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            return None
        return str(data.get("version")) if isinstance(data, dict) and data.get("version") else None

    def available(self) -> bool:
        try:
            self.locate()
        except AgentError:
            return False
        return True

    def prepare(self, ctx: LaunchContext) -> None:
        """Write config files into ``ctx.home`` before the run (telemetry off, provider set)."""
        return None

    @abc.abstractmethod
    def command(self, ctx: LaunchContext) -> list[str]:
        """The argv that runs one non-interactive task in ``ctx.workdir``."""

    def environment(self, ctx: LaunchContext) -> dict[str, str]:
        """Variables the CLI needs on top of the runner's minimal environment."""
        return {}

    def final_message(self, ctx: LaunchContext, stdout: str) -> str | None:
        """The CLI's own account of its last message, when the captured calls do not give one."""
        return None
