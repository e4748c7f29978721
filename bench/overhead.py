"""Runtime overhead benchmarks (figures, not tests). Each case prints one JSON line.

  python bench/overhead.py core     # N tasks through the tool agent, scripted oracle at 0 ms, per placement
  python bench/overhead.py collect  # `palaestra eval run` at 0/200 ms latency × concurrency 1/64/1000
  python bench/overhead.py http     # `eval run --model URL` against a scripted OpenAI-compatible server on
                                    # 127.0.0.1 (the issue's target: CPU of the eval process per rollout)
  python bench/overhead.py floor    # the floor: the cheapest possible rollout, next to `eval run`, same run
  python bench/overhead.py          # core, collect and http
  python bench/overhead.py core --tiny   # any of them at a smoke-test size (tests/bench runs this)

Knobs: N (core tasks, default 2000), ENV (workplace), COLLECT_N (rollouts at 0 ms, default 2000),
FLOOR_N (floor rollouts, default 2000), FLOOR_CODE_N (sandboxed code rollouts, default 300), SANDBOX (their
provider, default local), ROUNDS (floor rounds, default 5).

The floor (``floor``): a client doing only what a rollout must, each a child process measured by wait4,
against the same `palaestra model serve` oracle on 127.0.0.1: one aiohttp POST (the client library of
Palaestra's OpenAI-compatible backend) with the row's prompt, one orjson decode of the answer and encode
of a record, and one append to a JSONL file by a group-commit writer that fsyncs each batch in a worker
thread (the journal's policy). Its CPU per rollout is set against `palaestra eval run --model URL` on
the same rows, single-turn (mcqa, agent single) and multi-turn tool use (workplace, agent tool). Sandboxed
code tasks (code, agent single, `--sandbox SANDBOX`) are set against a floor of their own: the same client
also runs each answer with its tests as `python -I -S -c` in a plain child process. Both are
marginal CPU, (CPU of an N-rollout run − CPU of a 2-rollout run) / (N − 2), so interpreter start-up and
imports count for neither (two rollouts of two tasks, not one: a run of more than one task imports numpy
for its bootstrap interval, 0.1 s that would otherwise count as 25-50 µs per rollout); rounds interleave
floor and Palaestra, and the lowest of each is kept (the least disturbed by other load on the machine).
Five rounds of 2,000 by default, not three of 4,000: in the same time, more rounds give each side more
chances of a round the machine left alone (on a shared VM one round in three can run 30-80 % over its
side's lowest), and the CPU per rollout does not depend on N between 2,000 and 8,000 (docs/performance.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench_rows import bundled_rows, write_rows  # bench/ is on sys.path: this script's folder

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.server.ports import free_port


def _cpu_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _distinct_mcqa(task: Task, i: int) -> Task:
    """Row ``i`` made from a bundled mcqa task: its question and every option text carry the row's number,
    so no two rows share a text, as in a real dataset (repeated texts let ``re``'s cache of 512 compiled
    patterns hide a pattern compiled per row: it did hide 0.1 ms per rollout of mcqa's grading)."""
    options = task.metadata.get("options")
    if isinstance(options, dict):
        options = {k: f"{v} #{i}" for k, v in options.items()}
    elif isinstance(options, list):
        options = [{k: f"{v} #{i}" for k, v in o.items()} if isinstance(o, dict) else f"{o} #{i}" for o in options]
    question = f"{task.input} (#{i})" if isinstance(task.input, str) else task.input
    return task.model_copy(update={"input": question, "metadata": {**task.metadata, "options": options}})


def _tasks(env_name: str, n: int) -> list[Task]:
    """``n`` rows of ``env_name`` from its bundled tasks, each with an id of its own; mcqa rows are all
    different (``_distinct_mcqa``)."""
    out = bundled_rows(env_name, n)
    return [_distinct_mcqa(t, i) for i, t in enumerate(out)] if env_name == "mcqa" else out


def write_case_tasks(path: Path, env_name: str, n: int) -> Path:
    """The task file of a case: ``n`` rows of ``env_name`` (``_tasks``), written to ``path``."""
    return write_rows(path, _tasks(env_name, n))


async def core_case(env_name: str, placement: str, n: int, concurrency: int = 64) -> dict[str, object]:
    tasks = _tasks(env_name, n)
    mounted = await mount_env(env_name, placement)
    proxy, agent = ModelProxy(ScriptedBackend("oracle")), ToolAgent()
    sem = asyncio.Semaphore(concurrency)
    rewards: list[float] = []

    async def one(t: Task) -> None:
        async with sem:
            r = await run_rollout(t, env=mounted.client, agent=agent, proxy=proxy, model_name="scripted:oracle",
                                  with_reference=True)
            rewards.append(r.reward if r.reward is not None else float("nan"))

    c0, cc0, t0 = _cpu_s(resource.RUSAGE_SELF), _cpu_s(resource.RUSAGE_CHILDREN), time.perf_counter()
    await asyncio.gather(*(one(t) for t in tasks))
    wall = time.perf_counter() - t0
    child_cpu_before_stop = None
    if mounted.process is not None:  # the env server's CPU, read from /proc before it exits
        raw = Path(f"/proc/{mounted.process.pid}/stat").read_text()  # noqa: ASYNC240 (procfs: no I/O wait)
        stat = raw.rsplit(")", 1)[1].split()  # fields after the command name; utime, stime are 14, 15
        child_cpu_before_stop = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    cpu = _cpu_s(resource.RUSAGE_SELF) - c0 + (child_cpu_before_stop or 0.0)
    await mounted.stop()
    _ = cc0
    return {"bench": "core", "env": env_name, "placement": placement, "tasks": n, "concurrency": concurrency,
            "rollouts_per_s": round(n / wall, 1), "cpu_ms_per_rollout": round(1000 * cpu / n, 3),
            "mean_reward": round(sum(rewards) / len(rewards), 4), "startup_s": round(mounted.startup_s, 3)}


def collect_case(latency_ms: int, concurrency: int, n: int, repeats: int = 1, model: str | None = None,
                 env_name: str = "mcqa", agent: str | None = None, extra: tuple[str, ...] = ()) -> dict[str, object]:
    """One `palaestra eval run` as a child process: wall time, its CPU and peak RSS from wait4."""
    with tempfile.TemporaryDirectory() as tmp:
        tasks = write_case_tasks(Path(tmp) / "tasks.jsonl", env_name, n)
        cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(tasks), "-q",
               "--model", model or f"scripted:oracle?latency_ms={latency_ms}", "-c", str(concurrency),
               "-k", str(repeats), *(["--agent", agent] if agent else []), *extra,
               "--out", str(Path(tmp) / "run")]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err = proc.stderr.read().decode()[-500:] if proc.stderr else ""
        metrics = json.loads((Path(tmp) / "run" / "metrics.json").read_text()) if status == 0 else {}
        calls = model_calls(Path(tmp) / "run") if status == 0 else 0
    total = n * repeats
    cpu = ru.ru_utime + ru.ru_stime
    ideal = total * latency_ms / 1000 / min(concurrency, total) if latency_ms else None
    return {"bench": "collect", "latency_ms": latency_ms, "concurrency": concurrency, "rollouts": total,
            "ok": status == 0, "wall_s": round(wall, 3), "rollouts_per_s": round(total / wall, 1),
            "cpu_s": round(cpu, 3), "cpu_ms_per_rollout": round(1000 * cpu / total, 3),
            "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
            "ideal_wall_s": round(ideal, 3) if ideal else None,
            "model_calls_per_rollout": round(calls / total, 3),
            "mean_reward": (metrics.get("overall") or {}).get("mean_reward"), **({"error": err} if status else {})}


@contextlib.contextmanager
def model_server(latency_ms: int, envs: tuple[str, ...] = ("mcqa",), tasks: Path | None = None) -> Iterator[str]:
    """`palaestra model serve` (the scripted oracle, knowing ``envs``' bundled tasks and those of the task
    file ``tasks``) on 127.0.0.1: its base URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "palaestra.cli.main", "model", "serve", "--policy", "oracle",
                               *[a for e in envs for a in ("--env", e)], *(["--tasks", str(tasks)] if tasks else []),
                               "--latency-ms", str(latency_ms), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the scripted model server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        server.wait(10)


def http_case(latency_ms: int, concurrency: int, n: int) -> dict[str, object]:
    """`eval run --model http://127.0.0.1:PORT/v1` against `palaestra model serve` (scripted oracle).

    Only the eval process is measured (wait4), as NeMo Gym's figure counts its own processes and not the
    fake model's: this is the runtime's cost per rollout when a real model server sits at the other end."""
    with tempfile.TemporaryDirectory() as d, \
            model_server(latency_ms, tasks=write_case_tasks(Path(d) / "known.jsonl", "mcqa", n)) as url:
        case = collect_case(latency_ms, concurrency, n, model=url)
    return {**case, "bench": "collect_http"}


def _num(value: object) -> float:
    """A figure of a case's JSON line (typed ``object`` there) as the number it is."""
    assert isinstance(value, (int, float)), value
    return float(value)


def model_calls(run_dir: Path) -> int:
    """Model calls recorded in a run's journal (every attempt's)."""
    with (run_dir / "rollouts.jsonl").open() as journal:
        return sum(len(json.loads(line)["trajectory"]["model_calls"]) for line in journal)


def floor_command(url: str, prompts: Path, n: int, concurrency: int, out: Path) -> list[str]:
    """The command of one floor client run (bench/floor_client.py) of the first ``n`` prompts, journaling to
    ``out`` (removed first, so its lines are this run's)."""
    out.unlink(missing_ok=True)
    return [sys.executable, str(Path(__file__).with_name("floor_client.py")), url, str(prompts), str(n),
            str(concurrency), str(out)]


def check_floor_journal(out: Path, n: int) -> None:
    """SystemExit unless the floor client journaled all ``n`` records to ``out``."""
    with out.open("rb") as fh:
        if sum(1 for _ in fh) != n:
            raise SystemExit("the floor client's journal lacks records")


def floor_run(url: str, prompts: Path, n: int, concurrency: int, tmp: Path, *, code: bool = False) -> float:
    """CPU seconds of one floor client run (bench/floor_client.py) of ``n`` rollouts, from wait4. ``code``:
    every answer must also pass its tests (the oracle's do), as every Palaestra case must score 1.0."""
    out = tmp / f"floor-{n}.jsonl"
    proc = subprocess.Popen(floor_command(url, prompts, n, concurrency, out), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    answer = proc.stdout.read().decode() if proc.stdout else ""
    done = json.loads(answer or "{}")
    if status != 0 or done.get("answered") != n or (code and done.get("passed") != n):
        err = proc.stderr.read().decode()[-800:] if proc.stderr else ""
        raise SystemExit(f"the floor client failed: {answer[-300:]} {err}")
    check_floor_journal(out, n)
    return ru.ru_utime + ru.ru_stime


# The baseline run of the marginal CPU: two rollouts of two tasks, so it takes every path a big run takes
# once (a run of one task skips the bootstrap interval, and with it numpy's import).
BASE = 2


@dataclass(frozen=True)
class FloorCase:
    """One kind of rollout the floor bench sets against its floor: ``env`` and ``agent`` for `eval run`
    (plus ``extra`` flags), ``n`` rollouts at ``concurrency``, compared with the floor client on the same
    prompts (``code``: the floor also runs the program, in a plain child process)."""

    env: str
    agent: str
    n: int
    concurrency: int
    code: bool = False
    extra: tuple[str, ...] = ()


def floor_prompts(path: Path, env_name: str, n: int) -> None:
    """The rows the floor client sends: each task's prompt (and, for ``code``, its tests)."""
    env = load_env(env_name)
    with path.open("w") as fh:
        for t in _tasks(env_name, n if env_name == "mcqa" else min(n, 200)):  # mcqa: every row different
            row: dict[str, object] = {"id": t.id, "messages": env.prompt(t)}
            if env_name == "code":
                row["tests"] = list(t.metadata["tests"])
            fh.write(json.dumps(row) + "\n")


def floor_case(n: int, rounds: int, concurrency: int = 64, code_n: int | None = None,
               sandbox: str = "local") -> dict[str, object]:
    """The floor next to `eval run` on the same fake model, rows and concurrency (see the module doc).

    Marginal CPU per rollout, (CPU(n) − CPU(BASE)) / (n − BASE), the lowest of ``rounds`` interleaved rounds.
    Sandboxed code tasks (``code``, ``code_n`` rollouts at concurrency 8 under ``sandbox``) have a floor of
    their own: the same client, which also runs each answer with its tests in a plain child process."""
    code_n = code_n or max(20, n // 10)
    cases = {"single_turn": FloorCase("mcqa", "single", n, concurrency),
             "multi_turn": FloorCase("workplace", "tool", n, concurrency),
             "sandboxed_code": FloorCase("code", "single", code_n, 8, code=True, extra=("--sandbox", sandbox))}
    floors: dict[bool, list[float]] = {False: [], True: []}
    runs: dict[str, list[dict[str, object]]] = {k: [] for k in cases}
    with tempfile.TemporaryDirectory() as d, \
            model_server(0, ("workplace", "code"), write_case_tasks(Path(d) / "known.jsonl", "mcqa", n)) as url:
        tmp = Path(d)
        # each floor runs on the prompts, size and concurrency of the case it is set against
        floor_of = {False: cases["single_turn"], True: cases["sandboxed_code"]}
        prompts = {code: tmp / f"{case.env}-prompts.jsonl" for code, case in floor_of.items()}
        for code, case in floor_of.items():
            floor_prompts(prompts[code], case.env, case.n)
        for _ in range(rounds):
            for code, case in floor_of.items():
                full_s = floor_run(url, prompts[code], case.n, case.concurrency, tmp, code=code)
                base_s = floor_run(url, prompts[code], BASE, 1, tmp, code=code)
                floors[code].append((full_s - base_s) / (case.n - BASE))
            for key, case in cases.items():
                full, one = (collect_case(0, conc, count, model=url, env_name=case.env, agent=case.agent,
                                          extra=case.extra) for conc, count in ((case.concurrency, case.n), (1, BASE)))
                if not (full["ok"] and one["ok"]):
                    raise SystemExit(f"eval run failed: {full.get('error') or one.get('error')}")
                marginal = (_num(full["cpu_s"]) - _num(one["cpu_s"])) / (case.n - BASE)
                runs[key].append({**full, "marginal_cpu_s": marginal})
    base, code_base = min(floors[False]), min(floors[True])
    if base <= 0 or code_base <= 0:
        raise SystemExit(f"the floor is not measurable at {n} / {code_n} rollouts (marginal CPU {floors}): raise "
                         "FLOOR_N")
    line: dict[str, object] = {"bench": "floor", "rollouts": n, "rounds": rounds, "concurrency": concurrency,
                               "model": "palaestra model serve (scripted oracle, 0 ms) on 127.0.0.1",
                               "floor_cpu_ms_per_rollout": round(1000 * base, 4),
                               "floor_rounds_ms": [round(1000 * f, 4) for f in floors[False]],
                               "code_floor_cpu_ms_per_rollout": round(1000 * code_base, 4),
                               "code_floor_rounds_ms": [round(1000 * f, 4) for f in floors[True]]}
    for key, case in cases.items():
        best = min(runs[key], key=lambda r: _num(r["marginal_cpu_s"]))
        cpu, calls = _num(best["marginal_cpu_s"]), _num(best["model_calls_per_rollout"])
        floor = code_base if case.code else base
        line[key] = {"env": case.env, "agent": case.agent, "rollouts": case.n, "concurrency": case.concurrency,
                     **({"sandbox": sandbox} if case.code else {}),
                     "cpu_ms_per_rollout": round(1000 * cpu, 4),
                     "rounds_ms": [round(1000 * _num(r["marginal_cpu_s"]), 4) for r in runs[key]],
                     "x_floor": round(cpu / floor, 2), "model_calls_per_rollout": calls,
                     "x_floor_per_model_call": round(cpu / (floor * calls), 2) if calls else None,
                     **_round_ratios(runs[key], floors[case.code]),
                     "mean_reward": best["mean_reward"], "rollouts_per_s": best["rollouts_per_s"]}
    return line


def _round_ratios(runs: list[dict[str, object]], floors: list[float]) -> dict[str, object]:
    """Each round's ratio to the floor measured in the same round (per model call), and their median.

    The lowest of each side's rounds can come from different rounds; a round's two figures were taken a few
    seconds apart, so machine-wide slowdowns (this VM's floor moved by 40 % within an hour) divide out."""
    ratios = [_num(r["marginal_cpu_s"]) / (f * (_num(r["model_calls_per_rollout"]) or 1.0))
              for r, f in zip(runs, floors, strict=True)]
    return {"x_floor_per_model_call_rounds": [round(x, 2) for x in ratios],
            "x_floor_per_model_call_median": round(statistics.median(ratios), 2)}


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--tiny"]
    tiny = "--tiny" in sys.argv[1:]  # a smoke-test size: seconds, not figures worth quoting
    what = args[0] if args else "all"
    if what not in ("core", "collect", "http", "floor", "all"):
        raise SystemExit(f"unknown case {what!r}: use core, collect, http, floor or all (and --tiny for a smoke "
                         "run)")
    if what == "floor":
        fn = int(os.environ.get("FLOOR_N", "200" if tiny else "2000"))  # marginal CPU needs a few hundred
        code_n = int(os.environ.get("FLOOR_CODE_N", "20" if tiny else "300"))
        print(json.dumps(floor_case(fn, int(os.environ.get("ROUNDS", "1" if tiny else "5")), code_n=code_n,
                                    sandbox=os.environ.get("SANDBOX", "local"))), flush=True)
        return
    n = int(os.environ.get("N", "20" if tiny else "2000"))
    env_name = os.environ.get("ENV", "workplace")
    if what in ("core", "all"):
        line: dict[str, object] = {"bench": "core", "env": env_name, "tasks": n, "agent": "tool",
                                   "model": "scripted:oracle (0 ms)"}
        for placement in ("direct", "inprocess", "local"):
            case = asyncio.run(core_case(env_name, placement, n))
            line[f"{placement}_rollouts_per_s"] = case["rollouts_per_s"]
            line[f"{placement}_cpu_ms_per_rollout"] = case["cpu_ms_per_rollout"]
            line[f"{placement}_mean_reward"] = case["mean_reward"]
        line["local_startup_s"] = case["startup_s"]
        print(json.dumps(line), flush=True)
    if what in ("collect", "all"):
        cn = int(os.environ.get("COLLECT_N", "8" if tiny else "2000"))
        cases = [(0, 4, cn), (20, 4, 8)] if tiny else [(0, 1, cn // 4), (0, 64, cn), (0, 1000, cn),
                                                       (200, 1, 20), (200, 64, 640), (200, 1000, 4000)]
        for latency, conc, count in cases:
            print(json.dumps(collect_case(latency, conc, count)), flush=True)
    if what in ("http", "all"):
        cn = int(os.environ.get("COLLECT_N", "8" if tiny else "2000"))
        for latency, conc, count in [(0, 4, cn)] if tiny else [(0, 64, cn), (200, 1000, 4000)]:
            print(json.dumps(http_case(latency, conc, count)), flush=True)


if __name__ == "__main__":
    main()
