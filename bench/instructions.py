"""Instructions per rollout, counted by valgrind: Palaestra's `eval run` and the floor client of
`bench/overhead.py floor`, on the same rows against the same `palaestra model serve` oracle on 127.0.0.1.

  python bench/instructions.py          # single-turn (mcqa, agent single) and multi-turn (workplace, agent tool)
  python bench/instructions.py --tiny   # single-turn at a smoke-test size (tests/bench runs this)

Knobs: N (rollouts per case, default 1000), CASES (single_turn,multi_turn).

Why a second measure beside CPU time: on a shared VM the CPU time of one run moves by 30 % and more with
the neighbours' load (the floor itself moved from 0.17 to 0.29 ms within an hour), so a change worth 5 %
cannot be seen in it. The count of instructions a process executes does not depend on that load: two
runs of the same tree agree to ~0.5 %. It is the measure to compare two trees with (run this on each).

What it is not: it counts user-space instructions only (valgrind's cachegrind, cache simulation off).
The kernel's work (sockets, the journal's fsync) is not in it, and the floor spends a larger share of its
time there, so the ratio here is higher than the CPU-time ratio the goal of issue 23 is stated in
(`bench/overhead.py floor`). Both are marginal figures, (count of N rollouts − count of 2) / (N − 2),
so start-up and imports count for neither; `PYTHONHASHSEED=0` fixes the one source of run-to-run
difference in Python itself. Only the measured process runs under valgrind (not its children, not the
model server), about fifty times slower than without it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import (  # bench/ is on sys.path
    BASE,
    check_floor_journal,
    floor_command,
    floor_prompts,
    model_calls,
    model_server,
    write_case_tasks,
)

VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no")
CASES = {"single_turn": ("mcqa", "single"), "multi_turn": ("workplace", "tool")}


def counted(cmd: list[str], tmp: Path) -> int:
    """Instructions (cachegrind's ``Ir``) that ``cmd`` executed; SystemExit naming the command if it failed."""
    out = tmp / "cachegrind.out"
    out.unlink(missing_ok=True)
    proc = subprocess.run([*VALGRIND, f"--cachegrind-out-file={out}", *cmd], capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed under valgrind (exit {proc.returncode}): "
                         f"{(proc.stdout + proc.stderr)[-1500:]}")
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"valgrind wrote no summary line to {out}")


def eval_run(url: str, tasks: Path, agent: str, concurrency: int, tmp: Path) -> tuple[int, dict[str, float]]:
    """Instructions of one `eval run` of ``tasks``, and its mean reward and model calls per rollout."""
    run = tmp / "run"
    shutil.rmtree(run, ignore_errors=True)
    ir = counted([sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(tasks), "-q",
                  "--model", url, "-c", str(concurrency), "--agent", agent, "--out", str(run)], tmp)
    metrics = json.loads((run / "metrics.json").read_text())
    with (run / "rollouts.jsonl").open("rb") as journal:
        rollouts = sum(1 for _ in journal)
    return ir, {"mean_reward": metrics["overall"]["mean_reward"],
                "model_calls_per_rollout": round(model_calls(run) / rollouts, 3)}


def floor_run(url: str, prompts: Path, n: int, concurrency: int, tmp: Path) -> int:
    """Instructions of one floor client run (bench/floor_client.py) of the first ``n`` prompts."""
    journal = tmp / "floor.jsonl"
    ir = counted(floor_command(url, prompts, n, concurrency, journal), tmp)
    check_floor_journal(journal, n)
    return ir


def measure(n: int, cases: list[str], concurrency: int = 64) -> dict[str, object]:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind (Debian), or see valgrind.org")
    line: dict[str, object] = {"bench": "instructions", "tool": " ".join(VALGRIND), "rollouts": n,
                               "concurrency": concurrency,
                               "model": "palaestra model serve (scripted oracle, 0 ms) on 127.0.0.1"}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        known = write_case_tasks(tmp / "known.jsonl", "mcqa", n)
        with model_server(0, ("workplace",), known) as url:
            prompts = tmp / "prompts.jsonl"
            floor_prompts(prompts, "mcqa", n)
            floor = (floor_run(url, prompts, n, concurrency, tmp) - floor_run(url, prompts, BASE, 1, tmp)) / (n - BASE)
            line["floor_instructions_per_rollout"] = round(floor)
            for key in cases:
                env_name, agent = CASES[key]
                big = write_case_tasks(tmp / f"{env_name}-{n}.jsonl", env_name, n)
                small = write_case_tasks(tmp / f"{env_name}-{BASE}.jsonl", env_name, BASE)
                ir_big, facts = eval_run(url, big, agent, concurrency, tmp)
                ir_small, _ = eval_run(url, small, agent, 1, tmp)
                per = (ir_big - ir_small) / (n - BASE)
                if per <= 0:  # a thread that spins while the run waits makes the count follow the clock
                    raise SystemExit(f"{key}: {n} rollouts counted {ir_big:,} instructions, {BASE} counted "
                                     f"{ir_small:,}: the count depends on something besides the rollouts "
                                     "(a thread spinning while the run waits?); compare the two with cg_diff")
                calls = facts["model_calls_per_rollout"]
                line[key] = {"env": env_name, "agent": agent, "instructions_per_rollout": round(per),
                             "x_floor": round(per / floor, 2),
                             "x_floor_per_model_call": round(per / (floor * calls), 2), **facts}
    return line


def main() -> None:
    tiny = "--tiny" in sys.argv[1:]
    n = int(os.environ.get("N", "20" if tiny else "1000"))
    cases = os.environ.get("CASES", "single_turn" if tiny else "single_turn,multi_turn").split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown or n <= BASE:
        raise SystemExit(f"CASES must name {', '.join(CASES)} (got {unknown}) and N must be over {BASE}")
    print(json.dumps(measure(n, cases)), flush=True)


if __name__ == "__main__":
    main()
