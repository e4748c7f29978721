"""Creation, reaping and exit cleanup for host-directory providers (``local``, ``process``, ``none``,
``apptainer``). The order in ``create`` is the point: claim a uid, write the record, and only then make
directories, mounts and cgroups, so a crash at any instant leaves something the reaper can find."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import time
import weakref
from typing import Any, ClassVar

from palaestra.sandbox import cgroups as cg
from palaestra.sandbox import fsops
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.hostbox import HostSandbox, destroy
from palaestra.sandbox.oslevel import can_mount, mount_tmpfs
from palaestra.sandbox.registry import Registry, is_own, new_box_id, owner_alive, owner_fields
from palaestra.sandbox.types import SandboxError, SandboxSpec, as_bytes

_LIVE: weakref.WeakSet[HostProvider] = weakref.WeakSet()


def _close_all_at_exit() -> None:
    for provider in list(_LIVE):
        with contextlib.suppress(Exception):
            provider.cleanup(include_live=True)


atexit.register(_close_all_at_exit)


def world_traversable(path: str) -> bool:
    """Whether any uid may reach ``path`` (every directory above it has the other-x bit)."""
    cur = os.path.realpath(path)
    while True:
        try:
            if not os.stat(cur).st_mode & 0o001:
                return False
        except OSError:
            return False
        if cur == "/":
            return True
        cur = os.path.dirname(cur)


def _wanted(spec: SandboxSpec) -> set[str]:
    return {c for c, v in (("memory", spec.memory_mb), ("pids", spec.pids), ("cpu", spec.cpus)) if v}


class HostProvider(SandboxProvider):
    box_class: ClassVar[type[HostSandbox]] = HostSandbox
    dedicated_uid: ClassVar[bool] = True    # use one when root
    use_cgroups: ClassVar[bool] = True
    use_tmpfs: ClassVar[bool] = True
    supports_rootfs: ClassVar[bool] = False

    def __init__(self, registry: Registry | None = None, *, reap: bool = True) -> None:
        self.registry = registry or Registry()
        self.boxes: dict[str, HostSandbox] = {}
        _LIVE.add(self)
        if reap:
            self.cleanup()

    @property
    def root_mode(self) -> bool:
        return self.dedicated_uid and os.geteuid() == 0

    def forget(self, box_id: str) -> None:
        self.boxes.pop(box_id, None)

    async def create(self, spec: SandboxSpec | None = None) -> HostSandbox:
        self.require()
        spec = spec or SandboxSpec()
        if spec.rootfs and not self.supports_rootfs:
            raise SandboxError(f"the '{self.name}' provider cannot use SandboxSpec.rootfs (it has no mount namespace)",
                               hint="use the local provider for a root filesystem, or an image with docker")
        return await asyncio.to_thread(self._create_sync, spec)

    def _create_sync(self, spec: SandboxSpec) -> HostSandbox:
        box_id = new_box_id(self.name)
        now = time.time()
        record: dict[str, Any] = {
            "id": box_id, "provider": self.name, "state": "creating", "created": now,
            "expires_at": now + spec.lifetime_s if spec.lifetime_s else None,
            "labels": dict(spec.labels), "box_dir": str(self.registry.boxes_dir / box_id),
            "uid": None, "cgroups": cg.BoxCgroups.plan(box_id, _wanted(spec)).paths if self.use_cgroups else [],
            "mount": False, **owner_fields(),
        }
        if self.root_mode:
            record["uid"] = self.registry.allocate_uid(box_id)
        record["mount"] = bool(self.use_tmpfs and spec.disk_mb and can_mount())
        self.registry.write(record)
        try:
            self._materialize(record, spec)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                destroy(record, self.registry)
            if isinstance(exc, (SandboxError, ValueError)):
                raise
            raise SandboxError(f"creating a '{self.name}' sandbox failed: {type(exc).__name__}: {exc}",
                               hint="run `palaestra sandbox info` to see what this machine supports") from exc
        record["state"] = "live"
        self.registry.write(record, sync=False)
        box = self.box_class(self, spec, record)
        self.boxes[box_id] = box
        return box

    def _materialize(self, record: dict[str, Any], spec: SandboxSpec) -> None:
        box_dir = record["box_dir"]
        os.mkdir(box_dir, 0o711)
        if record["mount"]:
            try:
                mount_tmpfs(box_dir, int(spec.disk_mb or 0) + 8)
            except OSError:
                record["mount"] = False
                self.registry.write(record)
        uid = record["uid"]
        for sub in ("work", "tmp"):
            path = os.path.join(box_dir, sub)
            os.mkdir(path, 0o700)
            if uid is not None:
                os.chown(path, uid, uid)
        if record["cgroups"]:
            boxcg = cg.BoxCgroups(record["cgroups"])
            try:
                boxcg.create(memory_mb=spec.memory_mb, pids=(spec.pids + 4) if spec.pids else None, cpus=spec.cpus)
            except OSError:
                boxcg.remove()
                record["cgroups"] = []
                self.registry.write(record)
        owner = (uid, uid) if uid is not None else None
        work = os.path.join(box_dir, "work")
        for rel, data in spec.files.items():
            inner = rel if not rel.startswith("/") else os.path.relpath(rel, spec.workdir)
            if inner.startswith(".."):
                raise ValueError(f"SandboxSpec.files: '{rel}' is outside workdir {spec.workdir}")
            fsops.write_file(work, inner, as_bytes(data), owner=owner)

    def cleanup(self, *, include_live: bool = False) -> int:
        """Destroy records of this provider whose owner is dead or whose lifetime passed (and, with
        ``include_live``, this process's own), then release uid claims nobody holds."""
        removed = 0
        now = time.time()
        live_ids = {r["id"] for r in self.registry.records()}
        for record in list(self.registry.records(self.name)):
            expired = record.get("expires_at") is not None and now > float(record["expires_at"]) + 5
            mine = is_own(record)
            if (mine and include_live) or not owner_alive(record) or expired:
                box = self.boxes.pop(str(record["id"]), None)
                if box is not None:
                    box._closed = True
                with contextlib.suppress(Exception):
                    destroy(record, self.registry)
                    removed += 1
        for uid, claim in list(self.registry.uid_claims()):
            if claim.get("box") not in live_ids and not owner_alive(claim):
                from palaestra.sandbox.oslevel import kill_uid

                kill_uid(uid)
                self.registry.release_uid(uid)
        return removed
