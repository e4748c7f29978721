"""Scale-out benchmark (figures, not a test): rollouts/s of `palaestra eval run` with one collector process
and with N worker processes (`--cluster local?workers=N`), in the CPU-bound regime where the collector is
the bottleneck (many short rollouts, scripted oracle at 0 ms), measured back to back in the same run,
interleaved over rounds, so a machine shared with other jobs slows every mode alike. Prints one JSON line
per round and one summary line (the last).

    python bench/scale.py

Knobs: N (rollouts per run, default 40000), CONCURRENCY (in flight, 64), LATENCY_MS (0), ENV (mcqa),
WORKERS (comma list of worker counts, default 1,2), ROUNDS (5); RAY=1 adds the Ray collector
(`--cluster ray:HOST:PORT?workers=W`, a private one-node cluster on 127.0.0.1) for the same worker
counts, PLACEMENT (direct | ray: environment replicas) applying to it.

Each run is one `eval run -q` process, as a user starts it (GC tuning included; quiet, so no progress bar
and no per-rollout callback for one).
``steady_rollouts_per_s`` counts from the first rollout's start to the last one's end (the collection
itself); ``rollouts_per_s`` divides by the whole command's wall time, start-up of the interpreter and the
workers, metrics and report included. ``cpu_ms_per_rollout`` is the CPU of the whole process tree (the
command and its workers) over the rollouts. ``ratio`` is a mode's steady throughput over the one-process
collector's of the same round, ``ratio_vs_1_worker`` over one worker process's (the issue's measure);
the summary gives the median and the range over rounds.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from bench_rows import bundled_rows, write_rows  # bench/ is on sys.path: this script's folder


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _one(out: Path, tasks: Path, n: int, conc: int, latency: int, cluster: str | None, placement: str,
         env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(tasks), "--model",
           f"scripted:oracle?latency_ms={latency}", "--concurrency", str(conc), "--out", str(out), "-q",
           "--placement", placement if cluster and cluster.startswith("ray") else "direct"]
    if cluster:
        cmd += ["--cluster", cluster]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"eval run {cluster or '(one process)'} exited {proc.returncode}: {proc.stderr[-2000:]}")
    first, last, scored, rewards, keys = float("inf"), 0.0, 0, 0.0, set()
    with (out / "rollouts.jsonl").open("rb") as fh:
        for line in fh:
            r = orjson.loads(line)
            first = min(first, r["started_at"])
            last = max(last, r["started_at"] + r["timings"].get("total_s", 0.0))
            keys.add((r["task_id"], r["repeat"]))
            if r["outcome"]["status"] == "scored":
                scored += 1
                rewards += (r.get("verdict") or {}).get("reward") or 0.0
    fig: dict[str, Any] = {"steady_rollouts_per_s": round(n / max(last - first, 1e-9), 1),
                           "rollouts_per_s": round(n / wall, 1), "wall_s": round(wall, 2),
                           "cpu_ms_per_rollout": round(1000 * cpu / n, 3), "scored": scored,
                           "distinct_slots": len(keys), "mean_reward": round(rewards / max(scored, 1), 4)}
    if (out / "cluster.json").is_file():
        fig["rollouts_by_worker"] = json.loads((out / "cluster.json").read_text()).get("rollouts_by_worker")
    shutil.rmtree(out, ignore_errors=True)  # journals of big runs add up on a small /tmp
    return fig


def _summary(rounds: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        steady = [r[mode]["steady_rollouts_per_s"] for r in rounds]
        cpu = [r[mode]["cpu_ms_per_rollout"] for r in rounds]
        out[mode] = {"steady_rollouts_per_s_median": round(statistics.median(steady), 1),
                     "steady_range": [min(steady), max(steady)],
                     "cpu_ms_per_rollout_median": round(statistics.median(cpu), 3)}
        if mode != "one_process":
            ratios = [r[mode]["ratio"] for r in rounds]
            e2e = [r[mode]["ratio_end_to_end"] for r in rounds]
            out[mode].update(ratio_median=round(statistics.median(ratios), 3), ratio_range=[min(ratios), max(ratios)],
                             ratio_end_to_end_median=round(statistics.median(e2e), 3))
            vs1 = [r[mode]["ratio_vs_1_worker"] for r in rounds if "ratio_vs_1_worker" in r[mode]]
            if vs1:
                out[mode].update(ratio_vs_1_worker_median=round(statistics.median(vs1), 3),
                                 ratio_vs_1_worker_range=[min(vs1), max(vs1)])
    return out


def main() -> None:
    # 40,000: two workers collect them in ~6 s, so a hiccup of a shared machine (a few hundred ms) moves one
    # run's rate by a few percent, where 10,000 (~1.5 s) let it move a round's ratio by a fifth
    n = int(os.environ.get("N", "40000"))
    conc = int(os.environ.get("CONCURRENCY", "64"))
    latency = int(os.environ.get("LATENCY_MS", "0"))
    env_name = os.environ.get("ENV", "mcqa")
    placement = os.environ.get("PLACEMENT", "direct")
    workers = [int(w) for w in os.environ.get("WORKERS", "1,2").split(",")]
    n_rounds = int(os.environ.get("ROUNDS", "5"))
    with_ray = os.environ.get("RAY", "") == "1"
    tmp = Path(tempfile.mkdtemp(prefix="pal-scale-", dir="/tmp"))
    head = None
    env = {k: v for k, v in os.environ.items() if k not in ("N", "WORKERS", "ROUNDS")}
    header: dict[str, Any] = {"bench": "scale", "env": env_name, "rollouts": n, "concurrency": conc,
                              "latency_ms": latency, "cores": os.cpu_count(), "rounds": n_rounds,
                              "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        tasks = tmp / "tasks.jsonl"
        write_rows(tasks, bundled_rows(env_name, n))
        modes: dict[str, str | None] = {"one_process": None}
        modes.update({f"local_{w}_workers": f"local?workers={w}" for w in workers})
        if with_ray:
            from palaestra.cluster.localnode import auth_env, start_head

            ray_env = auth_env()
            env.update(ray_env)
            head = start_head(tmp / "ray", cpus=max(workers), object_store_mb=200, env=ray_env)
            modes.update({f"ray_{w}_workers": f"ray:{head.address}?workers={w}&worker_cpus=1&env_replicas={w}"
                          for w in workers})
        rounds: list[dict[str, Any]] = []
        for i in range(n_rounds):
            fig: dict[str, Any] = {"bench": "scale_round", "round": i}
            order = list(modes) if i % 2 == 0 else list(reversed(modes))  # neither mode always goes first
            for mode in order:
                fig[mode] = _one(tmp / f"{mode}-{i}", tasks, n, conc, latency, modes[mode], placement, env)
            for mode in modes:
                if mode != "one_process":
                    base = fig["one_process"]
                    fig[mode]["ratio"] = round(fig[mode]["steady_rollouts_per_s"] / base["steady_rollouts_per_s"], 3)
                    fig[mode]["ratio_end_to_end"] = round(fig[mode]["rollouts_per_s"] / base["rollouts_per_s"], 3)
                    one = fig.get("local_1_workers")
                    if one is not None and mode.startswith("local_"):  # the acceptance ratio: N workers over one
                        fig[mode]["ratio_vs_1_worker"] = round(
                            fig[mode]["steady_rollouts_per_s"] / one["steady_rollouts_per_s"], 3)
            rounds.append(fig)
            print(json.dumps(fig), flush=True)
        print(json.dumps({**header, **_summary(rounds, list(modes)),
                          "load_average_end": [round(x, 2) for x in os.getloadavg()]}), flush=True)
    finally:
        if head is not None:
            head.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
