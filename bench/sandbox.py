"""Sandbox latency per available provider (figures, not tests). One JSON line per provider:

  python bench/sandbox.py            # every provider usable here, docker and podman also under gVisor
  N=50 python bench/sandbox.py local process 'podman?runtime=runsc'

Measures a whole sandbox's life (create + ``exec /bin/true`` + close: what one short rollout pays) as
p50/p99 milliseconds and sandboxes per second (one at a time), then, in one sandbox, ``/bin/true`` and a
Python start (``python -c pass``) through ``box.exec`` as min/median. docker and podman get the local base
image (imported when missing, as ``palaestra sandbox image build`` does); gvisor its unpacked root
filesystem; ``PALAESTRA_DOCKER_IMAGE`` names another image."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import warnings
from typing import Any

from palaestra.sandbox import SandboxError, SandboxSpec, available_providers, get_provider
from palaestra.sandbox.baseimage import BASE_IMAGE, ensure_image

N = int(os.environ.get("N", "30"))
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
            "exec_python": _ms(pys)}


async def main(names: list[str]) -> None:
    usable = available_providers()
    for name in names or [n for n in usable if n != "none"] + list(RUNTIMES) + ["none"]:
        ok, why = usable.get(name.split("?")[0], (False, "unknown provider"))
        if not ok:
            print(json.dumps({"provider": name, "skipped": why}), flush=True)
            continue
        try:
            print(json.dumps(await bench(name)), flush=True)
        except SandboxError as exc:  # e.g. a dockerd without the runsc runtime
            print(json.dumps({"provider": name, "skipped": exc.message}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
