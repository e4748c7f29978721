"""``bench/side_by_side.py --tiny`` runs end to end: the real model server on 127.0.0.1, the real
``palaestra eval run`` and, where ``.ci/setup-nemo-gym.sh`` installed it, the real NeMo Gym stack
(``gym env start`` + ``gym eval run``), and where ``.ci/setup-peers.sh`` installed them, the peers
(``inspect eval`` of a task file, ``vf-eval`` of an environment module, ``lm_eval run`` of a YAML task
directory), on the same generated rows.
Every row is answerable, so every tool must score every row 1.0 (equal rewards: the same grading); all
lines carry the same keys, so the figures line up."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "side_by_side.py"
TINY_ROWS = 20


# tests/fixtures/nemo_gym.py: the one place that knows where .ci/setup-nemo-gym.sh installs NeMo Gym
NEMO_GYM = runpy.run_path(str(ROOT / "tests" / "fixtures" / "nemo_gym.py"))
# tests/fixtures/peers.py: the same for the peers .ci/setup-peers.sh installs (Inspect AI, verifiers, lm-eval)
PEERS = runpy.run_path(str(ROOT / "tests" / "fixtures" / "peers.py"))


def run_bench(tmp_path: Path, tools: str, timeout_s: float, *extra: str) -> list[dict[str, Any]]:
    proc = subprocess.run([sys.executable, str(BENCH), "--tiny", "--tools", tools, "--require-nemo-gym",
                           "--require-peers", "--workdir", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=timeout_s)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return lines


def check_line(line: dict[str, Any], framework: str) -> None:
    assert line["framework"] == framework
    assert line["ok"] is True and line["error"] is None, line
    assert line["tasks"] == TINY_ROWS and line["rollouts"] == TINY_ROWS
    assert line["mean_reward"] == 1.0  # the oracle knows every row: anything less is a real failure
    assert line["model_calls"] == TINY_ROWS  # one single-turn call per row, seen by the model server
    assert line["client_cpu_s"] > 0 and line["cpu_ms_per_rollout"] > 0
    assert line["collect_s"] > 0 and line["rollouts_per_s_collect"] > 0
    assert line["eval_wall_s"] > 0 and line["startup_s"] >= 0
    assert line["procs_left_at_end"] >= 0


@pytest.mark.timeout(600)
def test_palaestra_half(tmp_path: Path) -> None:
    (line,) = run_bench(tmp_path, "palaestra", timeout_s=540)
    check_line(line, "palaestra")
    assert line["servers_cpu_s"] == 0.0 and line["servers_max_procs"] == 0  # no servers of its own
    assert line["procs_left_at_end"] == 0
    rows = (tmp_path / "rows.jsonl").read_text().splitlines()
    assert len(rows) == TINY_ROWS and len({json.loads(r)["uuid"] for r in rows}) == TINY_ROWS


@pytest.mark.timeout(1800)
def test_both_halves_have_the_same_keys(tmp_path: Path) -> None:
    """Both tools on the same rows (NeMo Gym's first start builds its server venvs: minutes)."""
    reason = NEMO_GYM["missing"]()
    if reason is not None:
        pytest.skip(f"nemo-gym: {reason}")  # the capability name PALAESTRA_REQUIRE knows (tests/conftest.py)
    palaestra, nemo_gym = run_bench(tmp_path, "palaestra,nemo-gym", timeout_s=1700)
    check_line(palaestra, "palaestra")
    check_line(nemo_gym, "nemo-gym")
    assert sorted(palaestra) == sorted(nemo_gym)
    assert nemo_gym["servers_cpu_s"] > 0 and nemo_gym["servers_max_procs"] > 0  # Ray and its servers ran


@pytest.mark.timeout(600)
@pytest.mark.parametrize("peer", ["inspect-ai", "verifiers", "lm-eval"])
def test_peer_beside_palaestra(tmp_path: Path, peer: str) -> None:
    """A peer driven as its users drive it (Inspect AI: `inspect eval` of a task file; verifiers: `vf-eval`
    of a SingleTurnEnv module; lm-eval: `lm_eval run --model local-chat-completions` of a YAML task in an
    --include_path directory), on the rows Palaestra runs: the same keys, every row scored 1.0."""
    reason = PEERS["missing"](peer)
    if reason is not None:
        pytest.skip(f"peers: {reason}")  # the capability name PALAESTRA_REQUIRE knows (tests/conftest.py)
    palaestra, other = run_bench(tmp_path, f"palaestra,{peer}", timeout_s=540)
    check_line(palaestra, "palaestra")
    check_line(other, peer)
    assert sorted(palaestra) == sorted(other)
    assert other["version"] == PEERS["version"](peer)
    assert other["servers_cpu_s"] == 0.0 and other["servers_max_procs"] == 0  # one command, no servers
    assert other["fake_cpu_s"] >= 0 and palaestra["round"] == other["round"] == 1


def test_missing_peer_names_its_installer(tmp_path: Path) -> None:
    """Without its venv a peer is skipped with a note naming .ci/setup-peers.sh; --require-peers makes that
    a failure line (what CI runs)."""
    env = {**os.environ, "PALAESTRA_INSPECT_VENV": str(tmp_path / "no-such-venv")}
    cmd = [sys.executable, str(BENCH), "--tiny", "--tools", "inspect-ai", "--workdir", str(tmp_path / "work")]
    skipped = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert skipped.returncode == 0 and skipped.stdout == "", skipped.stderr[-3000:]
    assert "inspect-ai skipped" in skipped.stderr and ".ci/setup-peers.sh" in skipped.stderr
    required = subprocess.run([*cmd, "--require-peers"], capture_output=True, text=True, timeout=120, env=env)
    assert required.returncode == 1
    (line,) = [json.loads(text) for text in required.stdout.splitlines()]
    assert line["framework"] == "inspect-ai" and line["ok"] is False and ".ci/setup-peers.sh" in line["error"]


def test_table_gives_medians_over_rounds() -> None:
    bench = runpy.run_path(str(BENCH))
    base = {"ok": True, "version": "1.0", "peak_rss_mb_servers": 0.0, "rollouts_per_s_collect": 100.0,
            "startup_s": 1.0, "mean_reward": 1.0}
    results = [{**base, "framework": "a", "cpu_ms_per_rollout": c, "rollouts_per_s": 10.0 * c,
                "peak_rss_mb_client": 50.0 + c} for c in (1.0, 3.0, 2.0)]
    results.append({"framework": "b", "ok": False, "error": "exit status 1"})
    text = bench["table"](results, ["a", "b", "c"])
    rows = text.splitlines()
    assert len(rows) == 4  # header, rule, a, b (c never ran)
    assert rows[2] == "| a 1.0 | 2.00 | 20 | 100 | 52 | 1.00 | 1 | 3/3 |"
    assert rows[3] == "| b | – | – | – | – | – | – | 0/1 |"
