"""The provider interface: environments and users' own code program against these two classes only,
so a task can move from a laptop (bubblewrap) to CI (the same) to a cluster (containers) unchanged."""

from __future__ import annotations

import abc
import posixpath
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar

from palaestra.sandbox.types import ExecResult, SandboxError, SandboxSpec, SandboxStatus


class Sandbox(abc.ABC):
    """A live sandbox. Use it as an async context manager, or call ``close()`` (idempotent).

    Paths given to ``upload``/``download`` are paths *inside* the sandbox: relative ones are taken from
    ``workdir``; absolute ones must lie under ``workdir`` or ``/tmp``. ``resolve(path)`` turns such a path
    into the one a sandboxed command sees (identical, except for the ``process``/``none`` providers, which
    have no mount namespace and keep the files in a host directory)."""

    id: str
    spec: SandboxSpec
    provider_name: ClassVar[str] = ""

    @abc.abstractmethod
    async def exec(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        """Run ``argv`` (no shell) and wait at most ``timeout`` seconds; the whole process tree dies then."""

    @abc.abstractmethod
    async def upload(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        """Write a file (parents are created); a symlink in the way is never followed."""

    @abc.abstractmethod
    async def download(self, path: str, *, max_bytes: int = 64 << 20) -> bytes:
        """Read a regular file; a symlink or a special file is refused."""

    @abc.abstractmethod
    async def download_dir(self, path: str = ".", *, max_bytes: int = 64 << 20,
                           max_files: int = 10_000) -> dict[str, bytes]:
        """Every regular file under a directory, by path relative to it (symlinks are skipped)."""

    @abc.abstractmethod
    async def download_tar(self, path: str = ".", *, max_bytes: int = 64 << 20, max_files: int = 10_000) -> bytes:
        """A tar of a directory: files with their modes, empty directories, symlinks (not followed)."""

    @abc.abstractmethod
    async def upload_tar(self, data: bytes, path: str = ".") -> None:
        """Unpack a tar (e.g. another sandbox's ``download_tar``) below ``path``; nothing may escape it."""

    @abc.abstractmethod
    async def status(self) -> SandboxStatus: ...

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill everything the sandbox runs and remove its files; a second call does nothing."""

    @property
    def workdir(self) -> str:
        """The working directory as sandboxed commands see it."""
        return self.resolve(self.spec.workdir)

    def resolve(self, path: str) -> str:
        return self.inner_path(path)

    def inner_path(self, path: str) -> str:
        """Normalize a sandbox path: relative to ``workdir``, no ``..`` escaping it."""
        full = path if path.startswith("/") else posixpath.join(self.spec.workdir, path)
        norm = posixpath.normpath(full)
        if norm.startswith("//"):
            norm = norm[1:]
        return norm

    @staticmethod
    def checked_argv(argv: Sequence[str]) -> list[str]:
        """``argv`` as strings; every provider refuses an empty one or a NUL byte (no exec can carry it)."""
        out = [str(a) for a in argv]
        if not out or any("\0" in a for a in out):
            raise ValueError("argv must be a non-empty list of strings without NUL bytes")
        return out

    async def run(self, command: str, *, timeout: float = 30.0, **kwargs: Any) -> ExecResult:
        """Convenience: run a shell command line with ``/bin/sh -c``."""
        return await self.exec(["/bin/sh", "-c", command], timeout=timeout, **kwargs)

    async def upload_files(self, files: Mapping[str, bytes | str]) -> None:
        for path, data in files.items():
            await self.upload(path, data)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class SandboxProvider(abc.ABC):
    """Creates sandboxes of one kind. ``get_provider(name)`` returns one shared instance per process;
    making it runs the reaper once, so leftovers of crashed runs go away before new work starts."""

    name: ClassVar[str] = ""

    @classmethod
    @abc.abstractmethod
    def availability(cls) -> tuple[bool, str]:
        """(usable here?, why not / what it uses). Cheap, cached, never raises."""

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec | None = None) -> Sandbox: ...

    @abc.abstractmethod
    def cleanup(self, *, include_live: bool = False) -> int:
        """Remove leftovers whose owning runtime is gone (or whose lifetime passed); returns how many.

        ``include_live`` also removes sandboxes of *this* process (used at exit and by tests)."""

    def describe(self) -> dict[str, Any]:
        """What isolation this provider gives on this machine, feature by feature."""
        ok, why = self.availability()
        return {"provider": self.name, "available": ok, "detail": why}

    def require(self) -> None:
        ok, why = self.availability()
        if not ok:
            raise SandboxError(f"sandbox provider '{self.name}' is not usable here: {why}",
                               hint="pick another with PALAESTRA_SANDBOX=local|process|docker|none")
