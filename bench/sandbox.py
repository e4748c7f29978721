"""Sandbox exec latency per available provider (figures, not tests). One JSON line per provider:

  python bench/sandbox.py            # every provider usable here (docker when an engine answers)
  N=50 python bench/sandbox.py local process

Measures ``/bin/true`` and a Python start (``python -c pass``) through ``box.exec``, plus create and close,
each as min/median milliseconds over N runs. Docker needs an image: ``PALAESTRA_DOCKER_IMAGE`` or the
test image ``tests/sandbox/sandbox_rootfs.py`` imports."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from palaestra.sandbox import SandboxSpec, available_providers, get_provider

N = int(os.environ.get("N", "30"))


def _docker_image() -> str | None:
    image = os.environ.get("PALAESTRA_DOCKER_IMAGE")
    if image:
        return image
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "sandbox"))
    try:
        from sandbox_rootfs import ensure_image

        return ensure_image()
    except Exception:
        return None


def _ms(xs: list[float]) -> dict[str, float]:
    return {"min_ms": round(min(xs) * 1000, 2), "median_ms": round(statistics.median(xs) * 1000, 2)}


async def bench(name: str) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        provider = get_provider(name)
    spec = SandboxSpec(labels={"run_id": "bench"})
    python = str(getattr(provider, "python", "python3"))
    if name in ("docker", "podman"):
        image = _docker_image()
        if image is None:
            return {"provider": name, "skipped": "no image (set PALAESTRA_DOCKER_IMAGE)"}
        spec.image, python = image, "python3"
    creates, closes, trues, pys = [], [], [], []
    for _ in range(max(3, N // 5)):
        t = time.perf_counter()
        box = await provider.create(spec)
        creates.append(time.perf_counter() - t)
        t = time.perf_counter()
        await box.close()
        closes.append(time.perf_counter() - t)
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
    return {"provider": name, "runs": N, "exec_true": _ms(trues), "exec_python": _ms(pys),
            "create": _ms(creates), "close": _ms(closes)}


async def main(names: list[str]) -> None:
    usable = available_providers()
    for name in names or [n for n in usable if n != "none"] + ["none"]:
        ok, why = usable.get(name, (False, "unknown provider"))
        if not ok:
            print(json.dumps({"provider": name, "skipped": why}), flush=True)
            continue
        print(json.dumps(await bench(name)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
