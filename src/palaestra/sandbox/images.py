"""Container images built from a task's ``Dockerfile``, through the engine's CLI (``docker`` or
``podman``: only ``build``, ``image inspect`` and their common flags are used, so both work).

Why this exists: an imported task (Harbor, Terminal-Bench) is only graded the way its author meant when its
``RUN`` and ``COPY`` steps have really run. So the image is built, once: the tag is a content hash of the
build context, the Dockerfile as built and the base image's id, and a second task (or run) with the same
hash finds the image by tag and builds nothing.

No image registry is reachable here, and nothing is pulled: every ``FROM`` (and ``COPY --from``) image
must be on the machine. One that is not is replaced by a base from the local store (``base_images``: a
mapping from wanted to local image, then ``default_base``), and the substitution is recorded in the
``BuiltImage`` so verdicts and metrics can say it. ``RUN`` steps get the network the caller allows
(``network="host"``: the machine's configured package mirrors); a step that needs a host it cannot reach
ends as ``GradingFailure("environment", "needs_network: HOST")``, any other build failure as
``GradingFailure("environment", "image_build")`` with the tail of the build log, never as a reward.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from palaestra.core.grading import GradingFailure
from palaestra.sandbox.capture import decode
from palaestra.sandbox.docker_box import cli

TAG_PREFIX = "palaestra-task"
LOG_TAIL = 3000
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE | re.MULTILINE)
_COPY_FROM = re.compile(r"^(\s*(?:COPY|ADD)\s+(?:--\S+\s+)*--from=)(\S+)", re.IGNORECASE | re.MULTILINE)
_STAGE = re.compile(r"\s+AS\s+(\S+)", re.IGNORECASE)
# what build tools print when a host cannot be reached; the group is the host
_HOST_ERRORS = (
    re.compile(r"Could not resolve host:?\s*'?([A-Za-z0-9.-]+)"),  # curl, git
    re.compile(r"(?:Temporary failure resolving|Could not resolve) '([A-Za-z0-9.-]+)'"),  # apt
    re.compile(r"bad address '([A-Za-z0-9.-]+)'"),  # busybox wget
    re.compile(r"unable to resolve host address [‘'`\"]?([A-Za-z0-9.-]+)"),  # GNU wget
    re.compile(r"Failed to resolve '([A-Za-z0-9.-]+)'"),  # pip (urllib3 2)
    re.compile(r"host='([A-Za-z0-9.-]+)'.*(?:NewConnectionError|Max retries)"),  # pip (urllib3 1)
    re.compile(r"(?:getaddrinfo|connect) (?:ENOTFOUND|EAI_AGAIN|ECONNREFUSED) ([A-Za-z0-9.-]+)"),  # npm
    re.compile(r"Failed to connect to ([A-Za-z0-9.-]+) port"),  # curl
    re.compile(r"dial tcp: lookup ([A-Za-z0-9.-]+)"),  # go
)
_NETWORK_ANY = re.compile(r"Temporary failure in name resolution|Name or service not known|Network is unreachable|"
                          r"No address associated with hostname|nodename nor servname")
_URL_HOST = re.compile(r"\b(?:https?|ftp|git)://([A-Za-z0-9.-]+)")


def needed_host(log: str, dockerfile: str = "") -> str | None:
    """The host a failed step could not reach, from the build (or test) log; when the log only says the
    name did not resolve, the first URL host in ``dockerfile``; None when the failure was no network one."""
    for pattern in _HOST_ERRORS:
        found = pattern.findall(log)
        if found:
            return str(found[-1]).rstrip(".")
    if _NETWORK_ANY.search(log):
        url = _URL_HOST.search(dockerfile)
        return url.group(1) if url else "unknown"
    return None


@dataclass(frozen=True)
class BaseChoice:
    """One ``FROM`` image: what the Dockerfile wants and what was used (the same unless substituted)."""

    wanted: str
    used: str

    @property
    def substituted(self) -> bool:
        return self.wanted != self.used


@dataclass
class BuiltImage:
    """An image ready to run: its tag, whether it came from the cache, and what it was built on."""

    tag: str
    engine: str
    digest: str
    cached: bool
    bases: list[BaseChoice] = field(default_factory=list)
    build_s: float = 0.0
    workdir: str = "/"
    user: str = ""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def substituted(self) -> list[BaseChoice]:
        return [b for b in self.bases if b.substituted]

    def describe(self) -> dict[str, Any]:
        """What a verdict records: the image, cache hit, and every substituted base."""
        out: dict[str, Any] = {"tag": self.tag, "engine": self.engine, "cached": self.cached,
                               "build_s": round(self.build_s, 2)}
        if self.substituted:
            out["base_substituted"] = [{"wanted": b.wanted, "used": b.used} for b in self.substituted]
        return out


def dockerfile_images(text: str) -> tuple[list[str], list[str]]:
    """(``FROM`` images, ``COPY --from`` images) a Dockerfile needs from an image store: stage names
    (``FROM x AS build``; ``COPY --from=build``) and stage numbers are not images."""
    text = text.replace("\\\n", " ")
    stages: set[str] = set()
    froms: list[str] = []
    for m in _FROM.finditer(text):
        image = m.group(3)
        if image.lower() not in stages and image.lower() != "scratch":
            froms.append(image)
        stage = _STAGE.match(m.group(4))
        if stage:
            stages.add(stage.group(1).lower())
    copies = [m.group(2) for m in _COPY_FROM.finditer(text)
              if m.group(2).lower() not in stages and not m.group(2).isdigit()]
    return list(dict.fromkeys(froms)), list(dict.fromkeys(copies))


def rewrite_bases(text: str, used: Mapping[str, str]) -> str:
    """The Dockerfile with each substituted ``FROM`` image replaced (flags and ``AS name`` kept)."""
    def swap(m: re.Match[str]) -> str:
        return f"{m.group(1)}{m.group(2)}{used.get(m.group(3), m.group(3))}{m.group(4)}"

    return _FROM.sub(swap, text) if used else text


def context_digest(context: Path, dockerfile_text: str, base_ids: list[str]) -> str:
    """sha256 over every file of the build context (path, mode, bytes; ``.git`` left out), the
    Dockerfile as built and the ids of the base images: equal digests build equal images."""
    h = hashlib.sha256()
    h.update(dockerfile_text.encode())
    for base in base_ids:
        h.update(b"\0base\0" + base.encode())
    for dirpath, dirnames, filenames in os.walk(context):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(context).as_posix()
            h.update(b"\0file\0" + rel.encode())
            if full.is_symlink():
                h.update(b"link:" + os.readlink(full).encode())
            elif full.is_file():
                h.update(oct(full.stat().st_mode & 0o777).encode())
                h.update(full.read_bytes())
    return h.hexdigest()


class ImageBuilder:
    """Builds and caches task images with one engine CLI (``engine``: ``["docker"]``, or ``podman`` with
    the global flags its provider uses, so builds and containers see one storage)."""

    def __init__(self, engine: str | list[str], *, base_images: Mapping[str, str] | None = None,
                 default_base: str | None = None, network: Literal["host", "none"] = "host",
                 tag_prefix: str = TAG_PREFIX) -> None:
        """``base_images``: wanted image (or a pattern: ``python:*``) → local image to use instead;
        ``default_base``: used for any other image that is not on the machine; ``network``: what ``RUN``
        steps may reach."""
        self.command = [engine] if isinstance(engine, str) else list(engine)
        self.engine = Path(self.command[0]).name
        self.base_images = dict(base_images or {})
        self.default_base = default_base
        self.network = network
        self.tag_prefix = tag_prefix
        self._locks: dict[str, asyncio.Lock] = {}

    async def image_id(self, image: str) -> str | None:
        """The image's id when it is on the machine (nothing is pulled), else None."""
        cap = await cli(*self.command, "image", "inspect", "--format", "{{.Id}}", image, timeout=60)
        return decode(cap.stdout).strip() or None if cap.returncode == 0 else None

    async def choose_base(self, wanted: str, default_base: str | None = None) -> tuple[BaseChoice, str]:
        """The image to build on for ``wanted`` and its id: itself when present, else its substitute
        (``default_base``, when given, before the builder's own)."""
        own = await self.image_id(wanted)
        if own:
            return BaseChoice(wanted, wanted), own
        mapped = next((local for pattern, local in self.base_images.items() if fnmatch.fnmatchcase(wanted, pattern)),
                      None)  # exact names and patterns (``python:*``), in the mapping's order
        for candidate in (mapped, default_base, self.default_base):
            if candidate:
                found = await self.image_id(candidate)
                if found:
                    return BaseChoice(wanted, candidate), found
        raise GradingFailure(
            "environment", "base_image_missing", f"the Dockerfile builds on '{wanted}', which is not on this "
            f"machine, and no local base stands in for it (no registry is reachable to pull it)",
            hint=f"import or build it (`{self.engine} import ROOTFS.tar {wanted}`), or name a local base image "
                 "to substitute (default_base / base_images)")

    async def build(self, context: Path, dockerfile: Path, *, timeout: float = 600.0,
                    labels: Mapping[str, str] | None = None, default_base: str | None = None) -> BuiltImage:
        """The image for ``dockerfile`` with build context ``context``: from the cache when its digest is
        already built, else built now. Raises GradingFailure (environment) when it cannot be."""
        text = await asyncio.to_thread(dockerfile.read_text, encoding="utf-8", errors="replace")
        froms, copies = dockerfile_images(text)
        bases: list[BaseChoice] = []
        ids: list[str] = []
        for wanted in froms:
            choice, image_id = await self.choose_base(wanted, default_base)
            bases.append(choice)
            ids.append(image_id)
        for wanted in copies:  # COPY --from=IMAGE takes files from an image: no substitute can have them
            found = await self.image_id(wanted)
            if not found:
                raise GradingFailure("environment", "image_missing", f"the Dockerfile copies files from the image "
                                     f"'{wanted}', which is not on this machine (no registry is reachable)",
                                     hint=f"load it first (`{self.engine} load -i IMAGE.tar`)")
            ids.append(found)
        built_text = rewrite_bases(text, {b.wanted: b.used for b in bases if b.substituted})
        digest = await asyncio.to_thread(context_digest, context, built_text, ids)  # reads every file
        tag = f"{self.tag_prefix}:{digest[:24]}"
        lock = self._locks.setdefault(tag, asyncio.Lock())
        async with lock:
            start = time.monotonic()
            cached = await self.image_id(tag) is not None
            if not cached:
                await self._build(context, built_text, tag, timeout, labels or {})
            image = BuiltImage(tag=tag, engine=self.engine, digest=digest, cached=cached, bases=bases,
                               build_s=time.monotonic() - start)
        await self.configure(image)
        return image

    async def _build(self, context: Path, text: str, tag: str, timeout: float, labels: Mapping[str, str]) -> None:
        with tempfile.TemporaryDirectory(prefix="palaestra-build-") as tmp:
            path = Path(tmp) / "Dockerfile"
            path.write_text(text, encoding="utf-8")
            args = ["build", "--network", self.network, "-t", tag, "-f", str(path), "--label", "palaestra.task-image=1"]
            for key, value in labels.items():
                args += ["--label", f"palaestra.{key}={value}"]
            cap = await cli(*self.command, *args, str(context), timeout=timeout, cap=4 << 20)
        log = decode(cap.stdout) + decode(cap.stderr)
        if cap.timed_out:
            raise GradingFailure("environment", "image_build_timeout", f"building the task image took longer than "
                                 f"{timeout:g} s", output_tail=log[-LOG_TAIL:],
                                 hint="raise [environment] build_timeout_sec in task.toml")
        if cap.returncode == 0:
            return
        host = needed_host(log, text)
        if host:
            raise GradingFailure("environment", f"needs_network: {host}", f"a build step needs {host}, which "
                                 f"cannot be reached from here (build network: {self.network})",
                                 output_tail=log[-LOG_TAIL:],
                                 hint="vendor what the step downloads into the build context, or use a mirror "
                                      "this machine reaches")
        raise GradingFailure("environment", "image_build", f"`{self.engine} build` exited {cap.returncode}",
                             output_tail=log[-LOG_TAIL:], hint="the build log's tail above says which step failed")

    async def configure(self, image: BuiltImage) -> None:
        """The image's WORKDIR, USER and ENV: where and as whom the task's commands run."""
        cap = await cli(*self.command, "image", "inspect", "--format",
                        "{{.Config.WorkingDir}}\t{{.Config.User}}\t{{range .Config.Env}}{{.}}\x1f{{end}}",
                        image.tag, timeout=60)
        workdir, _, rest = decode(cap.stdout).rstrip("\n").partition("\t")
        user, _, env = rest.partition("\t")
        image.workdir = workdir or "/"
        image.user = user
        image.env = dict(kv.split("=", 1) for kv in env.split("\x1f") if "=" in kv)


DEBIAN_BASE = "palaestra-base:bookworm"
PYTHON_BASE = "palaestra-base:bookworm-python"


async def debian_bases(engine: list[str], *, suite: str = "bookworm", timeout: float = 1800.0) -> dict[str, str]:
    """Local base images made from Debian's packages, built once and then found by tag: a ``minbase``
    root file system (``mmdebstrap``, through this machine's apt mirror) imported as ``DEBIAN_BASE``,
    and ``PYTHON_BASE`` on top of it with ``python3`` (what most task tests run). Returns the
    ``base_images`` mapping: plain ``debian``/``ubuntu`` images on the first (their Dockerfiles install what
    they need), every other image (``python:*``, a benchmark's own base) on the second."""
    import shutil

    builder = ImageBuilder(engine, network="host")
    if await builder.image_id(DEBIAN_BASE) is None:
        if not shutil.which("mmdebstrap"):
            raise GradingFailure("environment", "base_image_missing", "mmdebstrap is not installed, so no Debian "
                                 "base image can be made", hint="apt-get install mmdebstrap")
        proc = await asyncio.create_subprocess_shell(
            f"mmdebstrap --quiet --variant=minbase --include=ca-certificates {suite} - | "
            f"{' '.join(engine)} import - {DEBIAN_BASE}", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        if proc.returncode != 0:
            raise GradingFailure("environment", "base_image_build", "the Debian base image could not be made",
                                 output_tail=decode(out)[-LOG_TAIL:])
    if await builder.image_id(PYTHON_BASE) is None:
        with tempfile.TemporaryDirectory(prefix="palaestra-base-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(
                f"FROM {DEBIAN_BASE}\nRUN apt-get update && apt-get install -y --no-install-recommends python3 "
                "&& rm -rf /var/lib/apt/lists/*\n", encoding="utf-8")
            cap = await cli(*engine, "build", "--network", "host", "-t", PYTHON_BASE, tmp, timeout=timeout)
            if cap.returncode != 0:
                raise GradingFailure("environment", "base_image_build", "the Python base image could not be built",
                                     output_tail=(decode(cap.stdout) + decode(cap.stderr))[-LOG_TAIL:])
    return {"python:*": PYTHON_BASE, "debian:*": DEBIAN_BASE, "ubuntu:*": DEBIAN_BASE, "*": PYTHON_BASE}
