"""Load figures (not a test): many rollouts in flight against the scripted model at 200 ms latency.

  python bench/load.py            # 10,000 in flight, 20,000 rollouts; prints one JSON line

Figures: throughput next to the latency-bound ideal (in-flight / latency) and the CPU-bound ceiling
(1 / CPU per rollout); peak memory per in-flight rollout (peak RSS over a 1-in-flight baseline); p50/p99
scheduling delay (how much longer each 200 ms model call took than 200 ms: event-loop congestion).
Knobs: IN_FLIGHT (10000), ROLLOUTS (2 × IN_FLIGHT), LATENCY_MS (200).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from palaestra.core.records import Task
from palaestra.envs.registry import load_env


def run(n: int, concurrency: int, latency_ms: int, tmp: Path) -> dict[str, float]:
    base = load_env("mcqa").examples()
    rows = tmp / f"tasks-{n}.jsonl"
    with rows.open("w") as fh:
        for i in range(n):
            t: Task = base[i % len(base)]
            fh.write(t.model_copy(update={"id": f"{t.id}-{i}"}).model_dump_json() + "\n")
    out = tmp / f"run-{n}-{concurrency}"
    cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(rows), "-q", "--agent", "single",
           "--model", f"scripted:oracle?latency_ms={latency_ms}", "-c", str(concurrency), "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"eval run failed: {proc.stderr.read().decode()[-500:] if proc.stderr else ''}")
    delays = []
    with (out / "rollouts.jsonl").open() as fh:
        for line in fh:
            for call in json.loads(line)["trajectory"]["model_calls"]:
                delays.append(max(0.0, call["latency_s"] - latency_ms / 1000))
    delays.sort()
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "p50_delay_ms": 1000 * statistics.median(delays),
            "p99_delay_ms": 1000 * delays[min(len(delays) - 1, int(0.99 * len(delays)))]}


def main() -> None:
    in_flight = int(os.environ.get("IN_FLIGHT", "10000"))
    n = int(os.environ.get("ROLLOUTS", str(2 * in_flight)))
    latency_ms = int(os.environ.get("LATENCY_MS", "200"))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        baseline = run(20, 1, 1, tmp)
        load = run(n, in_flight, latency_ms, tmp)
    ideal = in_flight / (latency_ms / 1000)
    throughput = n / load["wall_s"]
    cpu_ceiling = n / load["cpu_s"]
    print(json.dumps({
        "bench": "load", "in_flight": in_flight, "rollouts": n, "latency_ms": latency_ms,
        "rollouts_per_s": round(throughput, 1), "ideal_latency_bound_per_s": round(ideal, 1),
        "cpu_bound_ceiling_per_s": round(cpu_ceiling, 1),
        "fraction_of_ideal": round(throughput / ideal, 3),
        "fraction_of_cpu_ceiling": round(throughput / cpu_ceiling, 3),
        "cpu_ms_per_rollout": round(1000 * load["cpu_s"] / n, 3),
        "peak_rss_mb": round(load["peak_rss_mb"], 1),
        "kb_per_in_flight_rollout": round(1024 * (load["peak_rss_mb"] - baseline["peak_rss_mb"]) / in_flight, 2),
        "p50_scheduling_delay_ms": round(load["p50_delay_ms"], 2),
        "p99_scheduling_delay_ms": round(load["p99_delay_ms"], 2),
    }), flush=True)


if __name__ == "__main__":
    main()
