"""The run directory: ``run.json`` (resolved config, versions, verifier hashes; secrets redacted),
``tasks.jsonl`` (the snapshot of the tasks), ``rollouts.jsonl`` (the journal) and ``metrics.json``."""

from __future__ import annotations

import errno
import os
import platform
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.errors import PalaestraError
from palaestra.core.records import SCHEMA_VERSION
from palaestra.core.secrets import redact

__all__ = ["redact"]

RUN_JSON = "run.json"
TASKS = "tasks.jsonl"
JOURNAL = "rollouts.jsonl"
METRICS = "metrics.json"

class RunDirError(PalaestraError):
    """The run directory could not be created or written: one line naming the path and the fix, so a
    read-only or full disk reads as what it is instead of a traceback from deep inside the collector."""

    kind = "run_dir"


_FS_HINTS = {
    errno.EROFS: "that filesystem is read-only: give --out a writable directory",
    errno.EACCES: "no permission to write there: give --out a directory you can write, or fix its permissions",
    errno.EPERM: "the operation is not permitted there: give --out a directory you can write",
    errno.ENOSPC: "the disk is full: free space or give --out a directory on another disk, then resume",
    errno.EDQUOT: "the disk quota is used up: free space or give --out a directory elsewhere, then resume",
    errno.ENOTDIR: "part of that path is a file, not a directory: give --out another path",
    errno.EEXIST: "a file already has that name: give --out another path",
    errno.ENOENT: "a directory on that path does not exist and cannot be made there: give --out another path",
    errno.ENAMETOOLONG: "the path is too long: give --out a shorter path",
}


def fs_error(action: str, path: Path, exc: OSError) -> RunDirError:
    """An OSError on the run directory as a RunDirError: what failed, where, the OS reason and the fix."""
    code = errno.errorcode.get(exc.errno or 0, "")
    where = exc.filename if exc.filename else path
    reason = f"[{code}] {exc.strerror}" if code and exc.strerror else str(exc)
    return RunDirError(f"cannot {action} {where}: {reason}",
                       hint=_FS_HINTS.get(exc.errno or 0, "check the path and the disk holding it"))


@contextmanager
def guard_fs(action: str, path: Path) -> Iterator[None]:
    """Turn any OSError raised inside into a RunDirError about ``path``."""
    try:
        yield
    except OSError as exc:
        raise fs_error(action, path, exc) from None


def default_out(env: str | None) -> Path:
    """``runs/<timestamp>-<env>``; an environment given as a file or module spec (``./counter.py:Counter``)
    is named by its class, so the default is one directory, not a path of the spec's slashes."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = (env or "mixed").rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    label = re.sub(r"[^\w.-]+", "_", label).lstrip(".") or "env"
    return Path("runs") / f"{stamp}-{label}"


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    from palaestra.core.version import __version__

    return {"palaestra": __version__, "python": sys.version.split()[0], "platform": platform.platform()}


def run_manifest(run_id: str, config: dict[str, Any], envs: dict[str, dict[str, str]], n_tasks: int,
                 repeats: int) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": redact(config),
        "versions": versions(),
        "seed": config.get("seed"),
        "envs": envs,
        "tasks": n_tasks,
        "repeats": repeats,
    }


def read_manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((run_dir / RUN_JSON).read_bytes())
    return data
