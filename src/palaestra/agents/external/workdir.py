"""The CLI's working directory: seeded from the environment's files, diffed after the run, and the
changes handed back to the environment.

An external CLI edits files on its own disk, but the environment (and its verifier) holds the task's
real workspace. When the environment offers shell/file tools (``run`` + ``read_file`` to seed,
``write_file`` to hand back, as ``terminal`` does), the bridge goes through those tools, so the
changes land where the verifier looks, and are replayed by re-verification like any agent's tool
calls. Without such tools the changes are kept in the trajectory's ``harness`` metadata.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.agents.base import ToolSurface

MAX_FILES = 2000
MAX_FILE_BYTES = 1 << 20
PULL_MAX_KIB = 96  # under the 100 kB a read_file tool typically returns whole
SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv"}
_BEGIN, _EXEC, _END = "__PALAESTRA_FILES_BEGIN__", "__PALAESTRA_EXEC__", "__PALAESTRA_FILES_END__"

Snapshot = dict[str, tuple[str, bool]]


def snapshot(root: Path) -> Snapshot:
    """(sha256, executable) of every regular file (links not followed), by path relative to ``root``."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            full = Path(dirpath) / name
            if full.is_symlink() or not full.is_file():
                continue
            digest = hashlib.sha256(full.read_bytes()).hexdigest()
            out[full.relative_to(root).as_posix()] = (digest, bool(full.stat().st_mode & 0o100))
            if len(out) >= MAX_FILES:
                return out
    return out


@dataclass
class Changes:
    """What the CLI did to its working directory: text of written files, deleted paths, executable
    bits to set or clear, and the files that could not be carried as text (binary or too large)."""

    written: dict[str, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    chmod: dict[str, bool] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def as_metadata(self) -> dict[str, Any]:
        return {"written": self.written, "deleted": self.deleted, "chmod": self.chmod, "skipped": self.skipped}

    def __bool__(self) -> bool:
        return bool(self.written or self.deleted or self.chmod)


def diff(root: Path, before: Snapshot) -> Changes:
    after = snapshot(root)
    changes = Changes(deleted=sorted(set(before) - set(after)))
    for rel, (digest, executable) in sorted(after.items()):
        old = before.get(rel)
        if (old is None and executable) or (old is not None and old[1] != executable):
            changes.chmod[rel] = executable
        if old is not None and old[0] == digest:
            continue
        data = (root / rel).read_bytes()
        try:
            if len(data) > MAX_FILE_BYTES:
                raise UnicodeDecodeError("utf-8", b"", 0, 1, "too large")
            changes.written[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            changes.skipped.append(rel)
            changes.chmod.pop(rel, None)
    return changes


def _safe_rel(path: str) -> str | None:
    rel = os.path.normpath(path.strip())
    if rel.startswith("./"):
        rel = rel[2:]
    if not rel or rel == "." or rel.startswith("..") or os.path.isabs(rel):
        return None
    return rel


class ToolBridge:
    """Moves files between the environment (through its tools) and the CLI's working directory."""

    def __init__(self, tools: ToolSurface) -> None:
        self.tools = tools
        names = set(tools.names)
        self.can_list = {"run", "read_file"} <= names
        self.can_write = "write_file" in names
        self.can_run = "run" in names

    async def pull(self, root: Path) -> list[str]:
        """Copy the environment's working directory (text files under 96 KiB) into ``root``."""
        if not self.can_list:
            return []
        find = f"find . -type f -size -{PULL_MAX_KIB}k -not -path '*/.git/*'"
        listing = await self.tools.call("run", {"cmd": (
            f"echo {_BEGIN}; {find} 2>/dev/null | head -n {MAX_FILES}; echo {_EXEC}; "
            f"{find} -perm -u+x 2>/dev/null | head -n {MAX_FILES}; echo {_END}")})
        text = listing.output if isinstance(listing.output, str) else ""
        if listing.error or _BEGIN not in text or _EXEC not in text:
            return []
        files, _, execs = text.split(_BEGIN, 1)[1].split(_END, 1)[0].partition(_EXEC)
        executable = {_safe_rel(line) for line in execs.splitlines()}
        pulled = []
        for line in files.splitlines():
            rel = _safe_rel(line)
            if rel is None:
                continue
            result = await self.tools.call("read_file", {"path": rel})
            if result.error or not isinstance(result.output, str):
                continue
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(result.output, encoding="utf-8")
            if rel in executable:
                target.chmod(0o755)
            pulled.append(rel)
        return pulled

    async def push(self, changes: Changes) -> dict[str, str]:
        """Apply the changes through the tools; returns the paths whose write, delete or chmod failed."""
        failed: dict[str, str] = {}
        if self.can_write:
            for rel, content in changes.written.items():
                result = await self.tools.call("write_file", {"path": rel, "content": content})
                if result.error:
                    failed[rel] = str(result.error.get("message", "write failed"))
        if not self.can_run:
            return failed
        commands = {"rm -f": changes.deleted, "chmod +x": [p for p, x in changes.chmod.items() if x],
                    "chmod -x": [p for p, x in changes.chmod.items() if not x]}
        for verb, paths in commands.items():
            if not paths:
                continue
            result = await self.tools.call("run", {"cmd": f"{verb} -- " + " ".join(shlex.quote(p) for p in paths)})
            if result.error:
                failed.update({p: str(result.error.get("message", f"{verb} failed")) for p in paths})
        return failed
