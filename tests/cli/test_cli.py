"""The `palaestra` command as a user runs it: real processes, real servers on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from palaestra.server.ports import free_port

FIXTURES = Path(__file__).parents[1] / "fixtures"
CLI = [sys.executable, "-m", "palaestra.cli.main"]


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"{url} not healthy after {timeout} s")


def test_version_and_env_list_json() -> None:
    out = subprocess.run(CLI + ["--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("palaestra ")
    rows = json.loads(subprocess.run(CLI + ["env", "list", "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    by_name = {r["name"]: r for r in rows}
    assert {"mcqa", "math", "workplace"} <= set(by_name)
    assert all(by_name[n]["tasks"] >= 20 for n in ("mcqa", "math", "workplace"))
    assert by_name["workplace"]["tools"] >= 8


def test_user_env_file_served_without_touching_the_package(tmp_path: Path) -> None:
    """`palaestra env serve ./my_env.py:MyEnv` from the user's own directory."""
    src = (FIXTURES / "counter_env.py").read_text()
    (tmp_path / "my_env.py").write_text(src.replace("class CounterEnv", "class MyEnv"))
    port = free_port()
    token_file = tmp_path / "env.token"  # an environment server asks for the token it prints and saves
    proc = subprocess.Popen(CLI + ["env", "serve", "./my_env.py:MyEnv", "--port", str(port), "--token-file",
                                   str(token_file)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base + "/healthz", proc)
        for _ in range(500):  # written once the server listens, right after /healthz first answers
            if token_file.is_file() and token_file.read_text().strip():
                break
            time.sleep(0.02)
        auth = {"authorization": f"Bearer {token_file.read_text().strip()}"}
        with httpx.Client(base_url=base, headers=auth) as c:
            sid = c.post("/sessions", json={"task": {"id": "a", "input": "x", "metadata": {"target": 2}}}
                         ).json()["session_id"]
            assert c.post(f"/sessions/{sid}/tools/add", json={"amount": 2}).json()["output"] == "counter is now 2"
            assert c.post(f"/sessions/{sid}/verify", json={"trajectory": {"final_answer": "2"}}).json()["passed"]
            assert c.get("/info").json()["name"] == "counter"
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_refuses_a_public_address() -> None:
    proc = subprocess.run(CLI + ["env", "serve", "mcqa", "--host", "0.0.0.0", "--no-token"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "only allowed on loopback" in proc.stderr


def test_model_serve_scripted_speaks_openai(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(CLI + ["model", "serve", "--backend", "scripted", "--policy", "oracle", "--env", "mcqa",
                                   "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base + "/healthz", proc)
        from palaestra.envs.registry import load_env

        env = load_env("mcqa")
        task = env.examples()[0]
        from openai import OpenAI

        client = OpenAI(base_url=base + "/v1", api_key="unused")
        reply = client.chat.completions.create(model="scripted", messages=env.prompt(task))  # type: ignore[arg-type]
        expected = env.reference(task)
        assert expected is not None and reply.choices[0].message.content == expected.final_answer
    finally:
        proc.terminate()
        proc.wait(10)


def test_model_serve_oracle_knows_the_tasks_of_a_task_file(tmp_path: Path) -> None:
    """--tasks: the oracle answers rows that are in no environment's bundled tasks (a benchmark of
    distinct rows), and a bad task file is refused before serving, its row named."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "q1", "env": "mcqa", "input": "Which of these is a prime number?",
                                "metadata": {"options": {"A": "4", "B": "9", "C": "7", "D": "15"},
                                             "expected_answer": "C"}}) + "\n")
    port = free_port()
    proc = subprocess.Popen(CLI + ["model", "serve", "--policy", "oracle", "--tasks", str(rows), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base + "/healthz", proc)
        from palaestra.core.records import Task
        from palaestra.envs.registry import load_env

        prompt = load_env("mcqa").prompt(Task.model_validate_json(rows.read_text()))
        reply = httpx.post(base + "/v1/chat/completions", json={"model": "scripted", "messages": prompt}, timeout=30)
        assert reply.json()["choices"][0]["message"]["content"] == "\\boxed{C}"
        other = httpx.post(base + "/v1/chat/completions", timeout=30,
                           json={"model": "scripted", "messages": [{"role": "user", "content": "not a row"}]})
        assert "no reference for this conversation" in other.json()["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(10)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "q1", "env": "mcqa"}\nnot json\n')
    refused = subprocess.run(CLI + ["model", "serve", "--tasks", str(bad), "--port", str(free_port())],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "bad.jsonl:2" in refused.stderr, refused.stderr


def test_env_check_user_file_in_a_local_process() -> None:
    proc = subprocess.run(CLI + ["env", "check", str(FIXTURES / "counter_env.py") + ":CounterEnv",
                                 "--placement", "local"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for check in ("oracle scores full reward", "null policy scores nothing", "malformed tool calls get errors",
                  "grading failures come back typed", "sessions freed"):
        assert check in proc.stdout


def test_env_check_fails_a_broken_verifier(tmp_path: Path) -> None:
    src = (FIXTURES / "counter_env.py").read_text().replace("reward = 0.5 * hit + 0.5 * answered",
                                                             "reward = 0.5")
    (tmp_path / "broken.py").write_text(src)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "examples.jsonl").write_text((FIXTURES / "data" / "examples.jsonl").read_text())
    proc = subprocess.run(CLI + ["env", "check", "./broken.py:CounterEnv"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout


@pytest.mark.parametrize("cmd", [["eval", "metrics", "/nonexistent"], ["eval", "run", "--model", "x"],
                                 ["env", "info", "nosuch"]])
def test_errors_are_one_clear_line_not_a_traceback(cmd: list[str]) -> None:
    proc = subprocess.run(CLI + cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr


def test_eval_run_flags_map_one_to_one_to_the_run_config() -> None:
    import inspect

    from palaestra.cli.eval_cmds import run
    from palaestra.rollout.config import RunConfig

    params = set(inspect.signature(run).parameters)
    run_file_only = {"entries", "models", "model_prices", "routes"}  # routes: also from a NeMo Gym config file
    runtime_set = {"run_id"}  # the run's id, from run.json: no flag, no file field to set
    assert set(RunConfig.model_fields) - run_file_only - runtime_set <= params
    assert params - set(RunConfig.model_fields) == {"ctx", "config", "resume", "quiet", "show_config"}
