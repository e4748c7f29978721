"""Scale-out benchmark (figures, not a test): rollouts/s of one `eval run` with 1, 2 and 4 Ray rollout
worker processes, next to the single-process collector, on the scripted oracle at 200 ms per model call.
Prints one JSON object.

    python bench/scale.py

Knobs: N (rollouts, default 2000), CONCURRENCY (in flight, default 256), LATENCY_MS (200), ENV (mcqa),
WORKERS (comma list, default 1,2,4), PLACEMENT (direct: the env inside each worker | ray: env replicas).
The Ray cluster is a private one-node cluster on 127.0.0.1 with one logical CPU per worker; on a machine
with fewer cores than workers, the workers share them (the JSON says how many cores there were).

``steady_rollouts_per_s`` counts from the first rollout's start to the last one's end (the collection
itself); ``rollouts_per_s`` divides by the whole run's wall time, actor start-up included.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from palaestra.cluster.localnode import auth_env, start_head
from palaestra.envs.registry import load_env
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal import read_journal


def _write_tasks(path: Path, env_name: str, n: int) -> None:
    base = load_env(env_name).examples()
    with path.open("w") as fh:
        for i in range(n):
            t = base[i % len(base)]
            fh.write(t.model_copy(update={"id": f"{t.id}-{i}"}).model_dump_json() + "\n")


def _one(tmp: Path, label: str, tasks: Path, n: int, conc: int, latency: int, cluster: str | None,
         placement: str) -> dict[str, Any]:
    cfg = RunConfig(input=str(tasks), model=f"scripted:oracle?latency_ms={latency}", concurrency=conc,
                    out=str(tmp / label), cluster=cluster, placement=placement if cluster else "direct")
    t0 = time.perf_counter()
    result = asyncio.run(run_eval(cfg))
    wall = time.perf_counter() - t0
    records, _ = read_journal(tmp / label / "rollouts.jsonl")
    first = min(r["started_at"] for r in records)
    last = max(r["started_at"] + r["timings"].get("total_s", 0.0) for r in records)
    overall = result.metrics["overall"]
    return {"rollouts_per_s": round(n / wall, 1), "steady_rollouts_per_s": round(n / (last - first), 1),
            "wall_s": round(wall, 2), "scored": overall.get("n_rollouts_scored"),
            "mean_reward": overall.get("mean_reward")}


def main() -> None:
    n = int(os.environ.get("N", "2000"))
    conc = int(os.environ.get("CONCURRENCY", "256"))
    latency = int(os.environ.get("LATENCY_MS", "200"))
    env_name = os.environ.get("ENV", "mcqa")
    placement = os.environ.get("PLACEMENT", "direct")
    workers = [int(w) for w in os.environ.get("WORKERS", "1,2,4").split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="pal-scale-", dir="/tmp"))
    out: dict[str, Any] = {"bench": "scale", "env": env_name, "rollouts": n, "concurrency": conc,
                           "latency_ms": latency, "placement": placement, "cores": os.cpu_count(),
                           "ideal_rollouts_per_s": round(conc / (latency / 1000), 1) if latency else None}
    head = None
    try:
        tasks = tmp / "tasks.jsonl"
        _write_tasks(tasks, env_name, n)
        out["single_process"] = _one(tmp, "single", tasks, n, conc, latency, None, placement)
        env = auth_env()
        os.environ.update(env)
        head = start_head(tmp / "ray", cpus=max(workers), object_store_mb=200, env=env)
        for w in workers:
            cluster = f"ray:{head.address}?workers={w}&worker_cpus=1&env_replicas={w}"
            out[f"ray_{w}_workers"] = _one(tmp, f"ray{w}", tasks, n, conc, latency, cluster, placement)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if head is not None:
            head.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
