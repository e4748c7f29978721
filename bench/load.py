"""Load figures (not a test): many rollouts in flight against the scripted model at 200 ms latency.

  python bench/load.py                     # 65,000 in flight, 130,000 rollouts; prints one JSON line
  IN_FLIGHT=10000 python bench/load.py     # a lighter run

Figures: throughput next to the bound it can reach, min(in-flight / latency, cores / CPU per rollout)
(the latency-bound ideal and the CPU-bound ceiling are printed too; ``one_core_ceiling_per_s`` is what one
collector process can reach); memory per in-flight rollout (the highest RSS sampled while the journal
was still growing, over a 20-row, 1-in-flight baseline, divided by the in-flight count: an upper bound,
since the rows themselves are counted in it), the same at the margin (``kb_per_in_flight_marginal``: what
a tenth as many in flight over the same rows held less while collecting, per rollout in flight less:
the rows, the run's bounded journal keep and the report's bounded transcripts are the same in both, so
what is left is the rollouts in flight) and per rollout over the whole run (the peak RSS, which
includes writing metrics.json and report.html from every record);
p50/p99 scheduling delay (how much longer each 200 ms model call took than 200 ms: event-loop
congestion); the journal's record count, which must equal the rollouts asked for, each scored at its
first attempt. Anything lost, failed or retried, or an ``eval run`` that exits non-zero, makes this
script exit 1 after printing its line (``"ok": false`` and ``problems``).
Knobs: IN_FLIGHT (65000), ROLLOUTS (2 × IN_FLIGHT), LATENCY_MS (200), FAILURE_RATE (0: the share of model
calls the scripted model fails, to see a run with failures reported as one).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_rows import bundled_rows, write_rows  # bench/ is on sys.path: this script's folder


def run(n: int, concurrency: int, latency_ms: int, tmp: Path, failure_rate: float = 0.0) -> dict[str, Any]:
    """One ``eval run`` as a child process; its CPU and peak RSS from wait4, its journal read back."""
    rows = write_rows(tmp / f"tasks-{n}.jsonl", bundled_rows("mcqa", n))
    out = tmp / f"run-{n}-{concurrency}"
    cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(rows), "-q", "--agent", "single",
           "--model", f"scripted:oracle?latency_ms={latency_ms}&failure_rate={failure_rate:g}", "-c", str(concurrency),
           "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[int, int]] = []  # (RSS bytes, journal bytes), every 0.1 s while it runs
    sampler = threading.Thread(target=_sample, args=(proc.pid, out / "rollouts.jsonl", samples), daemon=True)
    sampler.start()
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    sampler.join(5)
    final = (out / "rollouts.jsonl").stat().st_size if (out / "rollouts.jsonl").exists() else 0
    # Collecting: until the journal holds its last record. What comes after (metrics.json, report.html)
    # reads every record back, a cost per rollout, not per rollout in flight.
    collecting = [rss for rss, size in samples if size < final]
    err = proc.stderr.read().decode()[-500:] if proc.stderr else ""
    delays: list[float] = []
    outcomes: Counter[str] = Counter()
    attempts: Counter[int] = Counter()
    slots: set[tuple[str, int]] = set()
    records = 0
    journal = out / "rollouts.jsonl"
    if journal.exists():
        with journal.open() as fh:
            for line in fh:
                rec = json.loads(line)
                records += 1
                outcomes[rec["outcome"]["status"]] += 1
                attempts[int(rec.get("attempt", 0))] += 1
                slots.add((rec["task_id"], int(rec.get("repeat", 0))))
                for call in rec["trajectory"]["model_calls"]:
                    delays.append(max(0.0, call["latency_s"] - latency_ms / 1000))
    delays.sort()
    return {"exit_code": os.waitstatus_to_exitcode(status), "stderr": err, "wall_s": wall,
            "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "collecting_rss_mb": max(collecting, default=0) / 2**20, "records": records,
            "slots": len(slots), "outcomes": dict(outcomes), "retries": sum(c for a, c in attempts.items() if a),
            "p50_delay_ms": 1000 * statistics.median(delays) if delays else None,
            "p99_delay_ms": 1000 * delays[min(len(delays) - 1, int(0.99 * len(delays)))] if delays else None}


def _sample(pid: int, journal: Path, samples: list[tuple[int, int]]) -> None:
    """RSS of the child and its journal's size, every 0.1 s until it exits (read from /proc)."""
    page = os.sysconf("SC_PAGE_SIZE")
    while True:
        try:
            with open(f"/proc/{pid}/statm") as fh:
                rss = int(fh.read().split()[1]) * page
            size = journal.stat().st_size if journal.exists() else 0
        except (OSError, ValueError, IndexError):
            return
        if rss == 0:  # a zombie: it has exited
            return
        samples.append((rss, size))
        time.sleep(0.1)


def problems_of(load: dict[str, Any], n: int) -> list[str]:
    """Why this run does not count as "nothing lost": each a short sentence, none when it does."""
    found = []
    if load["exit_code"] != 0:
        found.append(f"eval run exited {load['exit_code']}: {load['stderr'].strip()[-300:]}")
    if load["records"] != n or load["slots"] != n:
        found.append(f"journal holds {load['records']} records for {load['slots']} slots; {n} rollouts were asked")
    if load["outcomes"].get("scored", 0) != load["records"]:
        found.append(f"not every record is scored: {load['outcomes']}")
    if load["retries"]:
        found.append(f"{load['retries']} records are retries")
    return found


def main() -> None:
    in_flight = int(os.environ.get("IN_FLIGHT", "65000"))
    n = int(os.environ.get("ROLLOUTS", str(2 * in_flight)))
    latency_ms = int(os.environ.get("LATENCY_MS", "200"))
    failure_rate = float(os.environ.get("FAILURE_RATE", "0"))
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        baseline = run(20, 1, 1, tmp)
        fewer = max(1, in_flight // 10)
        low = run(n, fewer, latency_ms, tmp, failure_rate)  # the same rows, a tenth as many in flight
        load = run(n, in_flight, latency_ms, tmp, failure_rate)
    problems = problems_of(load, n) + [f"baseline: {p}" for p in problems_of(baseline, 20)]
    problems += [f"{fewer} in flight: {p}" for p in problems_of(low, n)]
    ideal = in_flight / (latency_ms / 1000)
    throughput = n / load["wall_s"]
    cpu_per_rollout = load["cpu_s"] / n
    cpu_ceiling = cores / cpu_per_rollout
    bound = min(ideal, cpu_ceiling)
    print(json.dumps({
        "bench": "load", "ok": not problems, "in_flight": in_flight, "rollouts": n, "latency_ms": latency_ms,
        "cores": cores, "journal_records": load["records"], "scored": load["outcomes"].get("scored", 0),
        "failed": load["records"] - load["outcomes"].get("scored", 0), "retries": load["retries"],
        "wall_s": round(load["wall_s"], 2), "rollouts_per_s": round(throughput, 1),
        "ideal_latency_bound_per_s": round(ideal, 1), "cpu_bound_ceiling_per_s": round(cpu_ceiling, 1),
        "one_core_ceiling_per_s": round(1 / cpu_per_rollout, 1), "bound_per_s": round(bound, 1),
        "fraction_of_bound": round(throughput / bound, 3), "fraction_of_ideal": round(throughput / ideal, 3),
        "cpu_ms_per_rollout": round(1000 * cpu_per_rollout, 3),
        "peak_rss_mb": round(load["peak_rss_mb"], 1), "collecting_peak_rss_mb": round(load["collecting_rss_mb"], 1),
        "baseline_peak_rss_mb": round(baseline["peak_rss_mb"], 1),
        "kb_per_in_flight_rollout": round(1024 * (load["collecting_rss_mb"] - baseline["peak_rss_mb"]) / in_flight, 2),
        "kb_per_in_flight_marginal": round(1024 * (load["collecting_rss_mb"] - low["collecting_rss_mb"])
                                           / max(in_flight - fewer, 1), 2),
        "collecting_peak_rss_mb_at_a_tenth": round(low["collecting_rss_mb"], 1),
        "kb_per_rollout_whole_run": round(1024 * (load["peak_rss_mb"] - baseline["peak_rss_mb"]) / n, 2),
        "p50_scheduling_delay_ms": round(load["p50_delay_ms"] or 0.0, 2),
        "p99_scheduling_delay_ms": round(load["p99_delay_ms"] or 0.0, 2),
        **({"problems": problems} if problems else {}),
    }), flush=True)
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
