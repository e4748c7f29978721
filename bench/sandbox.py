"""Sandbox figures per available provider (figures, not tests). One JSON line per provider:

  python bench/sandbox.py            # every provider usable here, docker and podman also under gVisor
  N=50 CONC=8 MAX_CONC=64 python bench/sandbox.py local process 'podman?runtime=runsc'
  python bench/sandbox.py --table    # also the markdown table of the docs, with machine and date

Measures a whole sandbox's life (create + ``exec /bin/true`` + close: what one short rollout pays) as
p50/p99 milliseconds and sandboxes per second (one at a time); then, in one sandbox, ``/bin/true`` and a
Python start (``python -c pass``) through ``box.exec`` as min/median; the memory an idle sandbox holds
(``IDLE`` sandboxes open, default 4: the PSS of the processes that appeared for them, the sandbox's own
and its engine's per-container helpers such as containerd-shim, conmon or gVisor's sentry; the engine
daemons' own growth is not counted); and ``CONC`` sandboxes at once (default 8: created, exec'd and closed
concurrently), doubling up to ``MAX_CONC`` while every one succeeds, as the most concurrent reached.
docker and podman get the local base image (imported when missing, as ``palaestra sandbox image build``
does); gvisor its unpacked root filesystem; ``PALAESTRA_DOCKER_IMAGE`` names another image."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from palaestra.sandbox import SandboxError, SandboxProvider, SandboxSpec, available_providers, get_provider
from palaestra.sandbox.baseimage import BASE_IMAGE, ensure_image

N = int(os.environ.get("N", "30"))
IDLE = int(os.environ.get("IDLE", "4"))
CONC = int(os.environ.get("CONC", "8"))
MAX_CONC = max(CONC, int(os.environ.get("MAX_CONC", str(CONC))))
HELPERS = ("containerd-shim", "conmon", "runsc", "exe")  # per-container helpers an engine starts
RUNTIMES = ("docker?runtime=runsc", "podman?runtime=runsc")


def _ms(xs: list[float]) -> dict[str, float]:
    return {"min_ms": round(min(xs) * 1000, 2), "median_ms": round(statistics.median(xs) * 1000, 2)}


def _pct(xs: list[float]) -> dict[str, float]:
    ordered = sorted(xs)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1), "p99_ms": round(p99 * 1000, 1),
            "per_s": round(len(xs) / sum(xs), 2)}


async def bench(name: str) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        provider = get_provider(name)
    spec = SandboxSpec(labels={"run_id": "bench"})
    python = str(getattr(provider, "python", "python3"))
    if name.split("?")[0] in ("docker", "podman"):
        image = os.environ.get("PALAESTRA_DOCKER_IMAGE") or ensure_image(provider.engine, BASE_IMAGE)[0]  # type: ignore[attr-defined]
        spec.image, python = image, "python3"
    elif name == "gvisor":
        python = "python3"
    cycles, trues, pys = [], [], []
    idle = await _idle(provider, spec)
    conc = await _concurrent(provider, spec)
    for _ in range(max(5, N)):
        t = time.perf_counter()
        box = await provider.create(spec)
        r = await box.exec(["/bin/true"])
        await box.close()
        cycles.append(time.perf_counter() - t)
        assert r.ok, r
    box = await provider.create(spec)
    try:
        await box.exec(["/bin/true"])
        for _ in range(N):
            t = time.perf_counter()
            r = await box.exec(["/bin/true"])
            trues.append(time.perf_counter() - t)
            assert r.ok, r
        for _ in range(max(3, N // 3)):
            t = time.perf_counter()
            r = await box.exec([python, "-c", "pass"])
            pys.append(time.perf_counter() - t)
            assert r.ok, r
    finally:
        await box.close()
    return {"provider": name, "runs": N, "create_exec_close": _pct(cycles), "exec_true": _ms(trues),
            "exec_python": _ms(pys), "idle": idle, "concurrent": conc}


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command name) of every live process."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_text()
                comm = raw[raw.index("(") + 1:raw.rindex(")")]
                out[int(entry)] = (int(raw[raw.rindex(")") + 2:].split()[1]), comm)
            except (OSError, ValueError, IndexError):
                continue
    return out


def _new_sandbox_pss_kb(before: set[int]) -> int:
    """PSS of the processes that appeared since ``before`` and belong to a sandbox: descendants of this
    process, or of a new per-container helper (other work on the machine is left out)."""
    procs = _procs()
    new = set(procs) - before
    roots = {pid for pid in new if procs[pid][1].startswith(HELPERS)} | {os.getpid()}
    counted = 0
    for pid in new:
        seen, cur = 0, pid
        while cur in procs and seen < 64:
            if cur in roots:
                counted += _pss_kb(pid)
                break
            cur, seen = procs[cur][0], seen + 1
    return counted


async def _idle(provider: SandboxProvider, spec: SandboxSpec) -> dict[str, float]:
    before = set(_procs())
    boxes = []
    try:
        for _ in range(IDLE):
            box = await provider.create(spec)
            boxes.append(box)
            await box.exec(["/bin/true"])  # whatever starts lazily is up
        await asyncio.sleep(0.5)
        kb = _new_sandbox_pss_kb(before)
    finally:
        await asyncio.gather(*(b.close() for b in boxes), return_exceptions=True)
    return {"sandboxes": IDLE, "pss_mb_per_sandbox": round(kb / 1024 / max(1, IDLE), 1)}


async def _wave(provider: SandboxProvider, spec: SandboxSpec, n: int) -> tuple[float, int]:
    """``n`` sandboxes created, exec'd and closed at once: (wall seconds, how many failed)."""
    async def one() -> None:
        box = await provider.create(spec)
        try:
            r = await box.exec(["/bin/true"], timeout=120)
            assert r.ok, r
        finally:
            await box.close()

    t = time.perf_counter()
    results = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    return time.perf_counter() - t, sum(isinstance(r, BaseException) for r in results)


async def _concurrent(provider: SandboxProvider, spec: SandboxSpec) -> dict[str, Any]:
    wall, failed = await _wave(provider, spec, CONC)
    out: dict[str, Any] = {"n": CONC, "wall_s": round(wall, 2), "per_s": round(CONC / wall, 2), "failed": failed}
    most, n = (CONC if not failed else 0), CONC
    while not failed and n * 2 <= MAX_CONC:
        n *= 2
        wall_n, failed = await _wave(provider, spec, n)
        if not failed:
            most = n
            out["at_most"] = {"n": n, "wall_s": round(wall_n, 2), "per_s": round(n / wall_n, 2)}
    out.update(most_concurrent=most, max_tried=n)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the sandbox README, from the JSON lines."""
    head = (f"Measured {time.strftime('%Y-%m-%d')} on {platform.node() or 'this machine'}: {os.cpu_count()} cores, "
            f"{platform.system()} {platform.release()}, load average {os.getloadavg()[0]:.1f}; N={N}, IDLE={IDLE}, "
            f"CONC={CONC}, MAX_CONC={MAX_CONC}.\n\n"
            "| provider | create + exec + close p50 / p99 (ms) | sandboxes/s (serial) | exec `/bin/true` median (ms) | "
            "`python -c pass` median (ms) | idle PSS per sandbox (MB) | CONC at once: s (per s) | most concurrent |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| `{r['provider']}` | skipped: {r['skipped']} |||||||")
            continue
        c, conc = r["create_exec_close"], r["concurrent"]
        most = f"{conc['most_concurrent']}" + (" (limit of the run)" if conc["most_concurrent"] == MAX_CONC else "")
        lines.append(f"| `{r['provider']}` | {c['p50_ms']:.0f} / {c['p99_ms']:.0f} | {c['per_s']} | "
                     f"{r['exec_true']['median_ms']:.0f} | {r['exec_python']['median_ms']:.0f} | "
                     f"{r['idle']['pss_mb_per_sandbox']} | {conc['wall_s']} ({conc['per_s']}) | {most} |")
    return "\n".join(lines)


async def main(names: list[str], markdown: bool) -> None:
    usable = available_providers()
    rows: list[dict[str, Any]] = []
    for name in names or [n for n in usable if n != "none"] + list(RUNTIMES) + ["none"]:
        ok, why = usable.get(name.split("?")[0], (False, "unknown provider"))
        if not ok:
            row: dict[str, Any] = {"provider": name, "skipped": why}
        else:
            try:
                row = await bench(name)
            except SandboxError as exc:  # e.g. a dockerd without the runsc runtime
                row = {"provider": name, "skipped": exc.message}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if markdown:
        print(table(rows))


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main([a for a in args if a != "--table"], "--table" in args))
