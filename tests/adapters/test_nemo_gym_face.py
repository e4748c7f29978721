"""Palaestra environments behind NeMo Gym's resources-server API, collected by NeMo Gym itself.

The faces (``adapters/nemo_gym_face``) of ``mcqa`` (single turn, NeMo Gym's own row layout) and
``workplace`` (tools and per-session state, rows written by ``nemo_gym_face_config``) run on 127.0.0.1;
NeMo Gym's ``gym env start`` starts its head server, its simple agents, its legacy-agent environment
servers and its ``openai_model`` server (pointed at Palaestra's scripted oracle on 127.0.0.1) from the
config ``config_snippet`` writes, and ``gym eval run --no-serve`` collects the rows. What NeMo Gym records
is compared with what Palaestra's own collector gives the same rows against the same model server:
reference answers score 1, wrong ones 0, and a verifier that crashes is a masked sample with NeMo Gym's
failure kind, left out of the mean reward NeMo Gym reports, never a measured 0. Without the NeMo Gym
install the module skips with the ``nemo-gym`` capability, which CI requires (PALAESTRA_REQUIRE), so
there it fails instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from palaestra.adapters.nemo_gym_face import create_nemo_face_app
from palaestra.adapters.nemo_gym_face_config import config_snippet, names, nemo_row, write_placeholder
from palaestra.core.errors import InfraError
from palaestra.core.records import Task, Trajectory, Verdict
from palaestra.envs.mcqa.env import MCQA
from palaestra.envs.mcqa.reading import normalize_options
from palaestra.envs.oracle import oracle_references
from palaestra.envs.registry import load_env
from palaestra.models.factory import make_backend
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.server.ports import free_port

pytestmark = pytest.mark.timeout(1200)

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))


class FaultyMCQA(MCQA):
    """mcqa whose verifier crashes on rows marked ``verifier_fault`` and whose seeding fails (no sandbox) on
    rows marked ``seed_fault``: how infrastructure failures of a Palaestra environment reach NeMo Gym."""

    def seed(self, task: Task) -> Any:
        if task.metadata.get("seed_fault"):
            raise InfraError("sandbox", "injected: the sandbox did not start")
        return super().seed(task)

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        if state.metadata.get("verifier_fault"):
            raise RuntimeError("injected verifier fault")
        return super().verify(state, trajectory)


def nemo_gym() -> Path:
    reason = NG.missing()  # from files only
    if reason is not None:
        pytest.skip(f"nemo-gym: {reason}")
    return Path(NG.venv_dir())


# ---- rows --------------------------------------------------------------------------------------
def mcqa_rows() -> tuple[list[dict[str, Any]], dict[str, float]]:
    """NeMo Gym mcqa rows (its own layout: options, expected_answer, grading_mode) of Palaestra's bundled
    questions, whose prompt the oracle knows; two ask for another letter than the one it gives (wrong),
    one is graded by a verifier that crashes. Returns the rows and the reward each should get."""
    rows, expected = [], {}
    for task in load_env("mcqa").examples()[:3]:
        env = load_env("mcqa")
        user = [m for m in env.prompt(task) if m.get("role") == "user"][-1]
        options = normalize_options(task.metadata["options"])
        row = {"responses_create_params": {"input": [{"role": "user", "content": user["content"]}]},
               "options": [{letter: text} for letter, text in options],
               "expected_answer": task.metadata["expected_answer"], "grading_mode": "strict_single_letter_boxed",
               "uuid": task.id, "agent_ref": {"type": "responses_api_agents", "name": names("mcqa")["agent"]}}
        rows.append(row)
        expected[task.id] = 1.0
    for row in rows[:2]:
        other = next(letter for letter, _ in [next(iter(o.items())) for o in row["options"]]
                     if letter != row["expected_answer"])
        rows.append({**row, "expected_answer": other, "uuid": row["uuid"] + "-wrong"})
        expected[row["uuid"] + "-wrong"] = 0.0
    rows.append({**rows[2], "uuid": rows[2]["uuid"] + "-fault", "verifier_fault": True})
    rows.append({**rows[2], "uuid": rows[2]["uuid"] + "-seedfault", "seed_fault": True})
    return rows, expected


def workplace_tasks() -> tuple[list[Task], dict[str, float]]:
    """Three bundled workplace tasks (the oracle knows their tool calls), and one that asks for the first
    task's change but checks for the second's: the oracle's tool calls change the wrong state (0)."""
    tasks = load_env("workplace").examples()[:3]
    wrong = tasks[1].model_copy(update={"id": tasks[1].id + "-wrong", "input": tasks[0].input})
    return [*tasks, wrong], {**{t.id: 1.0 for t in tasks}, wrong.id: 0.0}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- NeMo Gym ----------------------------------------------------------------------------------
def gym_environment(venv: Path, work: Path) -> dict[str, str]:
    """What `gym` runs with: its venv first on PATH, never Palaestra's; server venvs resolved as for the
    Python NeMo Gym requires (as bench/side_by_side.py does); W&B off; Ray kept on 127.0.0.1."""
    cfg = dict(line.partition("=")[::2] for line in (venv / "pyvenv.cfg").read_text().splitlines() if "=" in line)
    cfg = {k.strip(): v.strip() for k, v in cfg.items()}
    (work / "uv.toml").write_text('[pip]\npython-version = "3.13.14"\n')
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV", "COV"))}
    ours = {str(Path(sys.prefix) / "bin")}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in ours]
    home = [cfg["home"]] if cfg.get("home") else []
    env = {**inherited, "PATH": os.pathsep.join([str(venv / "bin"), *home, *path]),
           "UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1", "WANDB_MODE": "disabled", "VIRTUAL_ENV": str(venv),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    version = tuple(int(x) for x in cfg.get("version", cfg.get("version_info", "0.0.0")).split(".")[:3])
    if version < (3, 13, 14):
        env["UV_CONFIG_FILE"] = str(work / "uv.toml")
    return env


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group this test started: SIGINT (gym's own shutdown of its servers and Ray), then KILL."""
    for sig, grace in ((signal.SIGINT, 60), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader is gone; a server it started may not be
    except ProcessLookupError:
        pass


def head_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=3) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


RAY_START_TIMEOUT = "The current node timed out during startup"  # Ray's fixed 30 s raylet wait, on a busy machine


def start_servers(gym: str, work: Path, env: dict[str, str], head: int) -> subprocess.Popen[bytes]:
    """`gym env start`, waited on until its head server is ready. Ray's own start-up (before any server,
    the face included, is involved) gives up after a fixed 30 s on a loaded machine; only that is retried."""
    for attempt in range(3):
        log_path = work / f"env_start{attempt}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen([gym, "env", "start", "--config", str(work / "palaestra.yaml"), "--model-type",
                                     "openai_model", "--search-dir", str(work)], cwd=work, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 900
        while not head_ready(head):
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                stop(proc)
                raise AssertionError("gym env start: not ready after 900 s\n" + log_path.read_text()[-4000:])
            time.sleep(1)
        else:
            return proc
        stop(proc)
        text = log_path.read_text(errors="replace")
        assert RAY_START_TIMEOUT in text, text[-4000:]
    raise AssertionError(f"gym env start: Ray did not start in 3 attempts ({RAY_START_TIMEOUT})")


def collect_with_gym(work: Path, config: str, rows: Path, model_url: str) -> tuple[list[dict[str, Any]], Path]:
    """`gym env start` with ``config``, then `gym eval run --no-serve` over ``rows``; NeMo Gym's results."""
    venv = nemo_gym()
    servers = venv.parent / (venv.name + "-servers")
    head = free_port()
    write_placeholder(work)
    (work / "palaestra.yaml").write_text(config)
    # skip_venv_if_present: the two agents (and the two faces' placeholders) share one venv each; reinstalling
    # a venv while its twin starts from it is a race NeMo Gym's lock only avoids for venvs not yet built.
    (work / "env.yaml").write_text(
        f"policy_base_url: {model_url}\npolicy_api_key: unused\npolicy_model_name: oracle\n"
        f"uv_venv_dir: {servers}\nuv_cache_dir: {venv.parent / 'uv-cache'}\ndefault_host: 127.0.0.1\n"
        f"skip_venv_if_present: true\nhead_server:\n  host: 127.0.0.1\n  port: {head}\n")
    env = gym_environment(venv, work)
    gym = str(venv / "bin" / "gym")
    servers_proc = start_servers(gym, work, env, head)
    try:
        out = work / "rollouts.jsonl"
        with (work / "eval.log").open("wb") as log:
            run = subprocess.run([gym, "eval", "run", "--no-serve", "--input", str(rows), "--output", str(out),
                                  "--num-repeats", "1", "--concurrency", "4"], cwd=work, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                 timeout=600)
        assert run.returncode == 0, (work / "eval.log").read_text(errors="replace")[-4000:]
    finally:
        stop(servers_proc)
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()], out


async def palaestra_rewards(rows: Path, env: str, model_url: str, out: Path) -> dict[str, float]:
    """Palaestra's own collector on the same rows and model server: reward per task id."""
    await run_eval(RunConfig(input=str(rows), env=env, model=model_url, out=str(out)))
    got = {}
    for line in (out / "rollouts.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["outcome"]["status"] == "scored", record["outcome"]
        got[record["task_id"]] = float(record["verdict"]["reward"])
    return got


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    """One NeMo Gym collection over both environments' rows, and Palaestra's own over the same rows."""
    nemo_gym()
    work = tmp_path_factory.mktemp("nemo_face")
    m_rows, m_expected = mcqa_rows()
    wp = load_env("workplace")
    w_tasks, w_expected = workplace_tasks()
    w_rows = [nemo_row(wp, t, names("workplace")["agent"]) for t in w_tasks]
    backend = make_backend("scripted:oracle", references=oracle_references(["mcqa", "workplace"]))
    mcqa_app, wp_app = create_nemo_face_app(FaultyMCQA()), create_nemo_face_app(wp)
    with serve_app(create_model_app(ModelProxy(backend)), path="/v1") as model_url, \
            serve_app(mcqa_app, lifespan="on") as mcqa_url, serve_app(wp_app, lifespan="on") as wp_url:
        config = (config_snippet("mcqa", "127.0.0.1", int(mcqa_url.rsplit(":", 1)[1]))
                  + config_snippet("workplace", "127.0.0.1", int(wp_url.rsplit(":", 1)[1])))
        rows = write_jsonl(work / "rows.jsonl", m_rows + w_rows)
        (work / "gym").mkdir()
        results, out = collect_with_gym(work / "gym", config, rows, model_url)
        faces = {"mcqa": httpx.get(mcqa_url + "/healthz").json(), "workplace": httpx.get(wp_url + "/healthz").json()}
        plain = [{k: v for k, v in r.items() if k != "agent_ref"} for r in m_rows
                 if not r.get("verifier_fault") and not r.get("seed_fault")]
        ours = asyncio.run(palaestra_rewards(write_jsonl(work / "mcqa_plain.jsonl", plain), "mcqa", model_url,
                                             work / "palaestra_mcqa"))
        wp_plain = [t.model_dump(mode="json", exclude_none=True) for t in w_tasks]
        ours.update(asyncio.run(palaestra_rewards(write_jsonl(work / "wp_plain.jsonl", wp_plain), "workplace",
                                                  model_url, work / "palaestra_wp")))
    metrics = json.loads(out.with_name(out.stem + "_aggregate_metrics.json").read_text())
    yield SimpleNamespace(results=results, metrics=metrics, expected={**m_expected, **w_expected}, ours=ours,
                          faces=faces, rows=m_rows + w_rows)


def key(record: dict[str, Any]) -> str:
    return str(record.get("uuid") or record.get("id"))


def rewards_of(results: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    """The measured rewards NeMo Gym recorded (masked samples are no measurement)."""
    return {key(r): float(r["reward"]) for r in results if key(r).startswith(prefix) and not r.get("mask_sample")}


def test_single_turn_env_scores_under_nemo_gyms_collection_as_palaestra_scores_it(collected: SimpleNamespace) -> None:
    nemo = rewards_of(collected.results, "mcqa")
    expected = {k: v for k, v in collected.expected.items() if k.startswith("mcqa")}
    assert nemo == expected  # reference letter -> 1, another letter -> 0, every row recorded once
    assert {k: collected.ours[k] for k in expected} == nemo  # Palaestra's own verdicts on the same rows
    for r in collected.results:
        if key(r).startswith("mcqa") and not r.get("mask_sample"):
            assert r["palaestra_verdict"]["reward"] == r["reward"]
            assert r["resolved"] is (r["reward"] == 1.0)
            assert r["agent_ref"]["name"] == names("mcqa")["agent"]


def test_failures_are_masked_in_nemo_gym_never_a_measured_reward(collected: SimpleNamespace) -> None:
    for flag, kind, words in (("verifier_fault", "verifier_error", "injected verifier fault"),
                              ("seed_fault", "palaestra:sandbox", "the sandbox did not start")):
        fault = next(r["uuid"] for r in collected.rows if r.get(flag))
        [record] = [r for r in collected.results if key(r) == fault]
        assert record["mask_sample"] is True and record["failure_kind"] == kind
        assert words in record["failure_reason"]
    # NeMo Gym's reported mean (from the face's /aggregate_metrics) is over the measured rows only
    measured = list(rewards_of(collected.results, "mcqa").values())
    [mcqa] = [m for m in collected.metrics if m["agent_ref"]["name"] == names("mcqa")["agent"]]
    assert mcqa["agent_metrics"]["num_masked"] == 2 and mcqa["agent_metrics"]["num_rollouts"] == len(measured)
    assert mcqa["key_metrics"]["mean/reward"] == pytest.approx(sum(measured) / len(measured))


def test_tool_env_with_state_scores_under_nemo_gyms_collection(collected: SimpleNamespace) -> None:
    nemo = rewards_of(collected.results, "workplace")
    expected = {k: v for k, v in collected.expected.items() if k.startswith("workplace")}
    assert nemo == expected
    assert {k: collected.ours[k] for k in expected} == nemo
    for r in collected.results:
        if key(r).startswith("workplace"):
            calls = [it for it in r["response"]["output"] if it["type"] == "function_call"]
            outputs = [it for it in r["response"]["output"] if it["type"] == "function_call_output"]
            assert calls and len(outputs) == len(calls)  # NeMo Gym's agent ran the tools on the face
            assert all(not json.loads(o["output"]).get("error") if o["output"].startswith("{") else True
                       for o in outputs)
    # every rollout was seeded and verified on Palaestra's side, and no session outlived its rollout
    assert collected.faces["workplace"]["seeded"] == collected.faces["workplace"]["verified"] == len(expected)
    assert collected.faces["workplace"]["sessions"] == 0
    assert collected.faces["mcqa"]["seeded"] == len([k for k in collected.expected if k.startswith("mcqa")]) + 2
    assert collected.faces["mcqa"]["sessions"] == 0


def test_nemo_gyms_rollouts_reverify_statelessly_to_the_rewards_it_recorded(collected: SimpleNamespace) -> None:
    """What ``gym eval reverify`` does with a server whose ``/reverify_mode`` is ``stateless``: every rollout
    NeMo Gym collected, its row and recorded response, sent to ``/verify`` of a fresh face with no session.
    The face seeds anew, replays the response's tool calls (workplace state is rebuilt by them) and grades:
    the same reward as recorded. A workplace rollout with its tool calls taken out no longer scores in full:
    the reward comes from the replayed state, not from anything the record says."""
    rows = {key(r): r for r in collected.rows}
    checked: Counter[str] = Counter()
    with serve_app(create_nemo_face_app(MCQA()), lifespan="on") as mcqa_url, \
            serve_app(create_nemo_face_app(load_env("workplace")), lifespan="on") as wp_url:
        for r in collected.results:
            if r.get("mask_sample"):
                continue
            family = "workplace" if key(r).startswith("workplace") else "mcqa"
            url = wp_url if family == "workplace" else mcqa_url
            again = httpx.post(url + "/verify", json={**rows[key(r)], "response": r["response"]}, timeout=120).json()
            assert not again.get("mask_sample") and again["reward"] == r["reward"], (key(r), again)
            checked[family] += 1
        full = [r for r in collected.results if key(r).startswith("workplace") and r["reward"] == 1.0
                and any(it["type"] == "function_call" for it in r["response"]["output"])]
        assert full, "no workplace rollout scored in full with tool calls: nothing to take the calls out of"
        for r in full:
            bare = {**r["response"], "output": [it for it in r["response"]["output"]
                                                if it["type"] not in ("function_call", "function_call_output")]}
            again = httpx.post(wp_url + "/verify", json={**rows[key(r)], "response": bare}, timeout=120).json()
            assert not again.get("mask_sample") and again["reward"] < 1.0, (key(r), again)
    assert checked["mcqa"] >= 4 and checked["workplace"] >= len(full) >= 1


# ---- the face without NeMo Gym (always runs) ---------------------------------------------------------
def oracle_output(env: Any, task: Task, client: httpx.Client) -> list[dict[str, Any]]:
    """Run the task's reference through the face's tool routes; the Responses output NeMo Gym's agent
    would send to /verify."""
    ref = env.reference(task)
    out: list[dict[str, Any]] = []
    for i, call in enumerate(ref.tool_calls):
        answer = client.post(f"/{call.name}", json=call.arguments)
        assert answer.status_code == 200, answer.text
        out += [{"type": "function_call", "call_id": f"c{i}", "name": call.name,
                 "arguments": json.dumps(call.arguments)},
                {"type": "function_call_output", "call_id": f"c{i}", "output": answer.text}]
    out.append({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": ref.final_answer or ""}]})
    return out


def test_face_speaks_nemo_gyms_resources_protocol_with_typed_failures() -> None:
    rows, _ = mcqa_rows()
    good, wrong, fault, seed_fault = rows[0], rows[3], rows[5], rows[6]
    with serve_app(create_nemo_face_app(FaultyMCQA()), lifespan="on") as url:
        c = httpx.Client(base_url=url)
        assert c.post("/verify", json=good, headers={"Host": "evil.example"}).status_code == 400  # Host checked
        bad = c.post("/seed_session", json={"uuid": "x"})  # no question at all: the caller's error
        assert bad.status_code == 422 and bad.json()["error"]["kind"] == "invalid_task"
        assert c.post("/anything", json={}).json()["error"]["kind"] == "unknown_session"  # before any seed
        seeded = c.post("/seed_session", json=good)
        assert seeded.status_code == 200 and "palaestra_session" in seeded.cookies
        unknown = c.post("/no_such_tool", json={})
        assert unknown.status_code == 404 and unknown.json()["error"]["kind"] == "unknown_tool"
        answer = {"output": [{"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": f"\\boxed{{{good['expected_answer']}}}"}]}]}
        done = c.post("/ng-rollout/r1/verify", json={**good, "response": answer}).json()  # NeMo's rollout prefix
        assert done["reward"] == 1.0 and done["resolved"] is True and done["uuid"] == good["uuid"]
        assert c.get("/healthz").json()["sessions"] == 0  # verified: the session is closed
        again = httpx.Client(base_url=url).post("/verify", json={**wrong, "response": answer}).json()
        assert again["reward"] == 0.0 and not again.get("mask_sample")  # stateless: a fresh seed, a real 0
        c.post("/seed_session", json=fault)
        crashed = c.post("/verify", json={**fault, "response": answer}).json()
        assert crashed["mask_sample"] is True and crashed["failure_kind"] == "verifier_error"
        c.post("/seed_session", json=seed_fault)
        assert "did not start" in c.post("/any_tool", json={}).json()["error"]["message"]
        never = c.post("/verify", json={**seed_fault, "response": answer}).json()
        assert never["mask_sample"] is True and never["failure_kind"] == "palaestra:sandbox"
        metrics = c.post("/aggregate_metrics", json={"verify_responses": [
            {**done, "_ng_task_index": 0}, {**again, "_ng_task_index": 1}, {**crashed, "_ng_task_index": 2}]}).json()
        assert metrics["agent_metrics"] == {"mean/reward": 0.5, "num_rollouts": 2, "num_tasks": 2, "num_masked": 1}
        assert c.get("/reverify_mode").json() == "stateless"


def test_the_face_tells_the_rows_history_from_the_models_reply() -> None:
    """NeMo Gym's tool-use rows carry a history: reasoning items, earlier function calls and their outputs.
    Graded at the face's stateless ``/verify``, a text reply scores where the row expects a message and not
    where it expects a call: the calls of the history are not the model's. (The face once translated the
    history without its reasoning items, so the trajectory did not begin with the task's prompt and
    ``tool_call`` counted the history's calls as the reply's.)"""
    path = Path(__file__).parents[1] / "fixtures" / "data" / "nemo_gym"
    path = path / "single_step_tool_use_with_argument_comparison.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert all(any(i.get("type") == "reasoning" for i in r["responses_create_params"]["input"]) for r in rows)
    reply = {"output": [{"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "Could you tell me more?"}]}]}
    with serve_app(create_nemo_face_app(load_env("tool_call")), lifespan="on") as url:
        c = httpx.Client(base_url=url)
        got = [c.post("/verify", json={**row, "response": reply}).json() for row in rows]
    assert not any(g.get("mask_sample") for g in got), got
    want = [0.0 if r["expected_action"]["type"] == "function_call" else 1.0 for r in rows]
    assert [g["reward"] for g in got] == want and set(want) == {0.0, 1.0}


async def test_at_the_session_cap_a_seed_waits_then_fails_typed() -> None:
    from palaestra.server.sessions import EnvironmentHost

    rows, _ = mcqa_rows()
    answer = {"output": [{"type": "message", "role": "assistant", "content": "\\boxed{A}"}]}
    app = create_nemo_face_app(EnvironmentHost(FaultyMCQA(), max_sessions=1), limit_wait_s=1.0)
    with serve_app(app, lifespan="on") as url:
        async with httpx.AsyncClient(base_url=url) as first, httpx.AsyncClient(base_url=url) as second:
            assert (await first.post("/seed_session", json=rows[0])).status_code == 200

            async def finish_first() -> None:
                deadline = time.monotonic() + 30
                while (await first.get("/healthz")).json()["seeded"] < 2:  # the second seed is waiting
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
                await first.post("/verify", json={**rows[0], "response": answer})

            waited, _ = await asyncio.gather(second.post("/seed_session", json=rows[1]), finish_first())
            assert waited.status_code == 200  # it waited for the first session to close, then seeded
            assert (await second.post("/verify", json={**rows[1], "response": answer})).json()["mask_sample"] is False
            await first.post("/seed_session", json=rows[0])
            await second.post("/seed_session", json=rows[1])  # the cap is held past limit_wait_s
            late = (await second.post("/verify", json={**rows[1], "response": answer})).json()
            assert late["mask_sample"] is True and late["failure_kind"] == "palaestra:environment"


def palaestra_cli() -> str:
    found = Path(sys.executable).parent / "palaestra"
    assert found.is_file(), "the palaestra command beside this Python (pip install -e .)"
    return str(found)


def test_cli_serves_the_face_and_writes_config_rows_and_placeholder(tmp_path: Path) -> None:
    import yaml

    proc = subprocess.Popen([palaestra_cli(), "env", "serve", "workplace", "--nemo-gym", "--port", "0",
                             "--nemo-gym-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # blocks until ready (or EOF when it failed)
        assert line.startswith("PALAESTRA_READY "), proc.stderr.read().decode() if proc.stderr else line
        port = int(line.split()[1])
        config = yaml.safe_load((tmp_path / "palaestra_workplace.yaml").read_text())
        resources = config["palaestra_workplace"]["resources_servers"]["palaestra"]
        assert (resources["host"], resources["port"]) == ("127.0.0.1", port)
        agent = config["palaestra_workplace_simple_agent"]["responses_api_agents"]["simple_agent"]
        assert agent["resources_server"]["name"] == "palaestra_workplace"
        assert (tmp_path / "resources_servers" / "palaestra" / "app.py").is_file()
        env = load_env("workplace")
        rows = [json.loads(x) for x in (tmp_path / "palaestra_workplace_rows.jsonl").read_text().splitlines()]
        assert [r["id"] for r in rows] == [t.id for t in env.examples()]
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}")
        assert c.post("/seed_session", json=rows[0]).status_code == 200
        task = Task.model_validate(rows[0]["palaestra_task"])
        verdict = c.post("/verify", json={**rows[0], "response": {"output": oracle_output(env, task, c)}}).json()
        assert verdict["reward"] == 1.0 and verdict["resolved"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_refuses_to_serve_the_face_beyond_loopback() -> None:
    done = subprocess.run([palaestra_cli(), "env", "serve", "mcqa", "--nemo-gym", "--host", "0.0.0.0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no token" in done.stderr
