"""Every bench/ script runs, at a tiny size, and prints its figures.

The figures themselves are not checked (they depend on the machine and its load); what is checked is
that each script exits 0 and prints the JSON it documents, with the keys a reader of README's figures
relies on and the values that do not depend on speed (every rollout scored, nothing lost, the counts
asked for). A bench script nobody runs rots: ``bench/overhead.py core`` once died at its first line.

To keep the whole module short, the scripts of the selected tests are started together when the first
one needs its result (most of their time is interpreter start-up and waiting), and each test then waits
for its own. What a script needs that the machine may lack (Ray, the [local] extra) is decided before
anything starts; such a test skips naming the capability (see tests/conftest.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from palaestra.sandbox import available_providers

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
WAIT_S = 540  # a bound against a hang only: on an idle 2-core machine the whole module takes well under a minute
pytestmark = pytest.mark.timeout(WAIT_S + 60)

# Knobs the scripts read from the environment: a caller's own values must not leak into the smoke sizes.
KNOBS = ("N", "ENV", "COLLECT_N", "IN_FLIGHT", "ROLLOUTS", "LATENCY_MS", "CONCURRENCY", "WORKERS", "PLACEMENT",
         "FAILURE_RATE", "FLOOR_N", "ROUNDS", "IDLE", "CONC", "MAX_CONC",
         "RAY", "CASES")


def _modules(*names: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [n for n in names if importlib.util.find_spec(n) is None]
        return ", ".join(absent) + " not installed" if absent else None
    return missing


def _browser() -> bool:
    return importlib.util.find_spec("playwright") is not None and Path("/usr/bin/chromium").exists()


@dataclass
class Case:
    script: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    capability: str | None = None  # what the script needs, named as tests/conftest.py names it
    missing: Callable[[], str | None] = lambda: None


CASES: dict[str, Case] = {
    "fault_trials": Case("fault_trials.py", ["1", "--seed", "7"]),
    "instructions": Case("instructions.py", ["--tiny"], capability="valgrind",
                         missing=lambda: None if shutil.which("valgrind") else "valgrind not installed"),
    "fuzz_long": Case("fuzz_long.py", ["--tiny", "tests/fuzz/test_journal_lines.py"]),
    "load": Case("load.py", [], {"IN_FLIGHT": "4", "ROLLOUTS": "8", "LATENCY_MS": "20"}),
    "load_failing": Case("load.py", [], {"IN_FLIGHT": "4", "ROLLOUTS": "8", "LATENCY_MS": "20", "FAILURE_RATE": "1"}),
    "local_model": Case("local_model.py", ["--tokens", "2", "--batches", "1", "--repeat", "1"],
                        capability="local-model",
                        missing=_modules("torch", "transformers", "gguf", "llguidance")),
    "overhead_core": Case("overhead.py", ["core", "--tiny"]),
    "overhead_http": Case("overhead.py", ["http", "--tiny"]),
    "overhead_floor": Case("overhead.py", ["floor", "--tiny"]),
    "sandbox": Case("sandbox.py", ["local", "process", "--table"],
                    {"N": "2", "IDLE": "2", "CONC": "2", "MAX_CONC": "4"}),
    "scale": Case("scale.py", [], {"N": "8", "CONCURRENCY": "4", "LATENCY_MS": "10", "WORKERS": "1", "RAY": "1",
                                   "ROUNDS": "1"}, capability="ray", missing=_modules("ray")),
    "scale_local": Case("scale.py", [], {"N": "40", "CONCURRENCY": "8", "WORKERS": "1,2", "ROUNDS": "2"}),
    "viewer": Case("viewer.py", ["--n", "300"] + ([] if _browser() else ["--no-browser"])),
}


@dataclass
class Started:
    proc: subprocess.Popen[str]
    stderr: Any

    def result(self) -> tuple[int, str, str]:
        try:
            out, _ = self.proc.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        self.stderr.seek(0)
        return self.proc.returncode, out, self.stderr.read()


@pytest.fixture(scope="module")
def started(request: pytest.FixtureRequest) -> Iterator[dict[str, Started | str]]:
    """The selected scripts, all started at once; a str instead where a capability is missing."""
    wanted = {item.name.removeprefix("test_") for item in request.session.items
              if getattr(item, "module", None) is request.module and item.name.removeprefix("test_") in CASES}
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    runs: dict[str, Started | str] = {}
    for name in sorted(wanted):
        case = CASES[name]
        why = case.missing()
        if why is not None:
            runs[name] = f"{case.capability}: {why}"
            continue
        err = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen([sys.executable, str(BENCH / case.script), *case.args], cwd=ROOT,
                                env={**env, **case.env}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err, text=True)
        runs[name] = Started(proc, err)
    yield runs
    for run in runs.values():
        if isinstance(run, Started):
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.communicate()
            run.stderr.close()


def figures(started: dict[str, Started | str], name: str, exit_code: int = 0) -> list[dict[str, Any]]:
    """The JSON lines the script printed, after checking that it exited ``exit_code``."""
    run = started[name]
    if isinstance(run, str):
        pytest.skip(run)
    code, out, err = run.result()
    assert code == exit_code, f"bench/{CASES[name].script} exited {code}\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}"
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines, f"bench/{CASES[name].script} printed no JSON line: {out[-2000:]}"
    return lines


def test_fault_trials(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "fault_trials")
    assert fig["trials"] == 1 and fig["seed"] == 7 and fig["passed"] is True
    assert fig["lost"] == 0 and fig["duplicated"] == 0 and fig["failed_trials"] == 0
    assert fig["run_s"] > 0 and fig["wall_s"] > 0


def test_fuzz_long(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "fuzz_long")
    assert fig["bench"] == "fuzz_long" and fig["ok"] is True
    assert fig["tests"] >= 3 and fig["passed"] == fig["tests"] and fig["failed"] == fig["skipped"] == 0
    assert fig["failures"] == [] and {"test", "seconds"} <= set(fig["slowest"][0])


def test_load(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "load")
    assert (fig["bench"], fig["in_flight"], fig["rollouts"], fig["latency_ms"]) == ("load", 4, 8, 20)
    assert fig["ok"] is True and "problems" not in fig  # nothing lost, failed or retried
    assert fig["journal_records"] == fig["scored"] == 8 and fig["failed"] == fig["retries"] == 0
    assert fig["rollouts_per_s"] > 0 and fig["ideal_latency_bound_per_s"] == 200.0
    assert fig["bound_per_s"] == min(fig["ideal_latency_bound_per_s"], fig["cpu_bound_ceiling_per_s"])
    assert fig["cpu_ms_per_rollout"] > 0 and fig["peak_rss_mb"] > 0 and fig["cores"] >= 1
    # the margin: the same rows at a tenth as many in flight (here 1) ran too, and was measured while collecting
    assert fig["collecting_peak_rss_mb_at_a_tenth"] > 0 and isinstance(fig["kb_per_in_flight_marginal"], float)
    assert 0 <= fig["p50_scheduling_delay_ms"] <= fig["p99_scheduling_delay_ms"]


def test_load_failing(started: dict[str, Started | str]) -> None:
    """A load run whose rollouts fail (the scripted model fails every call) is reported as such and exits 1:
    `eval run` exits non-zero, and the journal's failed records and retries are named."""
    [fig] = figures(started, "load_failing", exit_code=1)
    assert fig["ok"] is False and fig["scored"] == 0 and fig["failed"] == fig["journal_records"] > 8
    assert fig["retries"] == fig["journal_records"] - 8
    assert any(p.startswith("eval run exited") and not p.startswith("eval run exited 0") for p in fig["problems"])


def test_local_model(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "local_model")
    assert (fig["concurrency"], fig["tokens_each"], fig["dtype"]) == (1, 2, "float32")
    assert fig["generate_tok_s"] > 0 and fig["backend_tok_s"] > 0 and fig["server_tok_s"] > 0
    assert fig["ratio_backend"] > 0 and fig["ratio_server"] > 0 and fig["threads"] >= 1


def test_overhead_core(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "overhead_core")
    assert fig["bench"] == "core" and fig["tasks"] == 20 and fig["env"] == "workplace"
    for placement in ("direct", "inprocess", "local"):
        assert fig[f"{placement}_mean_reward"] == 1.0  # the oracle solves every task, wherever the env runs
        assert fig[f"{placement}_rollouts_per_s"] > 0 and fig[f"{placement}_cpu_ms_per_rollout"] > 0
    assert fig["local_startup_s"] > 0


def test_overhead_http(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "overhead_http")
    assert fig["bench"] == "collect_http" and fig["ok"] is True and "error" not in fig
    assert fig["rollouts"] == 8 and fig["mean_reward"] == 1.0
    assert fig["cpu_ms_per_rollout"] > 0 and fig["peak_rss_mb"] > 0


def test_instructions(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "instructions")
    assert fig["bench"] == "instructions" and fig["rollouts"] == 20 and fig["tool"].startswith("valgrind")
    assert fig["floor_instructions_per_rollout"] > 0
    case = fig["single_turn"]
    assert case["env"] == "mcqa" and case["mean_reward"] == 1.0 and case["model_calls_per_rollout"] == 1.0
    assert case["instructions_per_rollout"] > 0
    assert case["x_floor"] == pytest.approx(case["instructions_per_rollout"] / fig["floor_instructions_per_rollout"],
                                            abs=0.01)
    assert "multi_turn" not in fig  # --tiny counts single-turn only


def test_overhead_floor(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "overhead_floor")
    assert fig["bench"] == "floor" and fig["rollouts"] == 200 and fig["rounds"] == 1
    assert fig["floor_cpu_ms_per_rollout"] == min(fig["floor_rounds_ms"]) > 0
    for key, env in (("single_turn", "mcqa"), ("multi_turn", "workplace")):
        case = fig[key]
        assert case["env"] == env and case["mean_reward"] == 1.0  # the same oracle solves every row
        assert case["x_floor"] == pytest.approx(case["cpu_ms_per_rollout"] / fig["floor_cpu_ms_per_rollout"], abs=0.02)
        # one round: its own ratio (per model call, against the floor of that round) is the median and the lowest
        assert case["x_floor_per_model_call_rounds"] == [case["x_floor_per_model_call_median"]]
        assert case["x_floor_per_model_call_median"] == pytest.approx(case["x_floor_per_model_call"], abs=0.02)
    assert fig["single_turn"]["model_calls_per_rollout"] == 1.0 and fig["multi_turn"]["model_calls_per_rollout"] > 1
    code = fig["sandboxed_code"]  # its own floor: the same client also runs each answer with its tests
    assert code["env"] == "code" and code["sandbox"] == "local" and code["rollouts"] == 20
    assert code["mean_reward"] == 1.0 and fig["code_floor_cpu_ms_per_rollout"] == min(fig["code_floor_rounds_ms"]) > 0
    assert code["x_floor"] == pytest.approx(code["cpu_ms_per_rollout"] / fig["code_floor_cpu_ms_per_rollout"], abs=0.02)


def test_sandbox(started: dict[str, Started | str]) -> None:
    by_provider = {fig["provider"]: fig for fig in figures(started, "sandbox")}
    assert set(by_provider) == {"local", "process"}
    usable = available_providers()
    for name, fig in by_provider.items():
        if usable[name][0]:
            assert fig["runs"] == 2 and "skipped" not in fig
            for key in ("exec_true", "exec_python"):
                assert 0 < fig[key]["min_ms"] <= fig[key]["median_ms"]
            cycle = fig["create_exec_close"]  # a whole sandbox's life: create + exec + close
            assert 0 < cycle["p50_ms"] <= cycle["p99_ms"] and cycle["per_s"] > 0
            assert fig["idle"]["sandboxes"] == 2 and fig["idle"]["pss_mb_per_sandbox"] >= 0
            conc = fig["concurrent"]  # 2 at once, then 4: both waves must succeed on any machine
            assert (conc["n"], conc["failed"], conc["most_concurrent"], conc["max_tried"]) == (2, 0, 4, 4)
            assert conc["wall_s"] > 0 and conc["at_most"]["n"] == 4
        else:
            assert fig["skipped"]  # a provider this machine lacks is reported as such, not benchmarked


def test_scale(started: dict[str, Started | str]) -> None:
    [round0, fig] = figures(started, "scale")
    assert fig["bench"] == "scale" and fig["rollouts"] == 8 and fig["concurrency"] == 4
    for run in ("one_process", "local_1_workers", "ray_1_workers"):
        assert round0[run]["scored"] == 8 and round0[run]["mean_reward"] == 1.0 and round0[run]["rollouts_per_s"] > 0
        assert fig[run]["steady_rollouts_per_s_median"] > 0


def test_scale_local(started: dict[str, Started | str]) -> None:
    """One collector process against 1 and 2 worker processes, interleaved: every run scores every slot
    once, the two workers share the work, and the summary's ratios are those of the rounds."""
    *rounds, fig = figures(started, "scale_local")
    assert fig["bench"] == "scale" and fig["rollouts"] == 40 and fig["rounds"] == len(rounds) == 2
    for r in rounds:
        for run in ("one_process", "local_1_workers", "local_2_workers"):
            assert r[run]["scored"] == r[run]["distinct_slots"] == 40 and r[run]["mean_reward"] == 1.0
            assert r[run]["steady_rollouts_per_s"] > 0 and r[run]["cpu_ms_per_rollout"] > 0
        by_worker = r["local_2_workers"]["rollouts_by_worker"]
        assert sum(by_worker) == 40 and len(by_worker) == 2
        assert r["local_2_workers"]["ratio"] == pytest.approx(
            r["local_2_workers"]["steady_rollouts_per_s"] / r["one_process"]["steady_rollouts_per_s"], abs=0.01)
    ratios = sorted(r["local_2_workers"]["ratio"] for r in rounds)
    assert fig["local_2_workers"]["ratio_range"] == [ratios[0], ratios[-1]]


def test_viewer(started: dict[str, Started | str]) -> None:
    [fig] = figures(started, "viewer")
    assert fig["bench"] == "viewer" and fig["n"] == 300 and fig["records"] == 300
    assert fig["first_page_rows"] == 50 and fig["first_page_s"] > 0 and fig["page_bytes"] > 0
    assert fig["index_complete_s"] >= 0 and fig["overview_s"] >= 0 and isinstance(fig["ok"], bool)
    if _browser():
        assert fig["browser_first_row_s"] is not None and fig["browser_first_row_s"] > 0
