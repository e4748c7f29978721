"""Run directories for the report tests: a real `eval run` and hand-made journals with known content."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

XSS = '</script><script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


def rollout(task: str, repeat: int = 0, *, attempt: int = 0, reward: float | None = 1.0,
            passed: bool | None = None, kind: str | None = None, env: str = "toy", model: str = "m",
            content: str = "hello", model_calls: list[dict[str, Any]] | None = None,
            timings: dict[str, float] | None = None) -> dict[str, Any]:
    """One journal record; ``kind`` makes it a failed attempt, ``reward=None`` too."""
    failed = kind is not None or reward is None
    return {
        "schema_version": 1, "rollout_id": f"{task}-{repeat}-{attempt}", "task_id": task, "env": env,
        "agent": "tool", "model": model, "repeat": repeat, "attempt": attempt,
        "outcome": {"status": "failed", "kind": kind or "model", "message": f"{kind or 'model'} broke"} if failed
        else {"status": "scored", "kind": None, "message": None},
        "verdict": None if failed else {"reward": reward, "passed": passed if passed is not None else reward >= 1,
                                        "components": {"exact": reward}, "metadata": {"gold": "B"},
                                        "answer": "B" if reward else "C"},
        "trajectory": {
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": content},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": '{"found": true}'},
                         {"role": "assistant", "content": f"answer to {content}"}],
            "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}, "output": {"found": True}, "status": "ok",
                            "started": 100.01, "duration_s": 0.002}],
            "model_calls": model_calls or [],
            "final_answer": f"answer to {content}", "steps": 2, "stop_reason": "final"},
        "usage": {"prompt_tokens": 50 + repeat, "completion_tokens": 7, "model_calls": 2, "tool_calls": 1},
        "timings": timings or {"seed_s": 0.01, "agent_s": 0.2 + repeat / 10, "verify_s": 0.003, "close_s": 0.001,
                               "total_s": 0.25 + repeat / 10},
        "started_at": 100.0,
    }


def write_run(run_dir: Path, records: list[dict[str, Any]], *, repeats: int = 2,
              tasks: list[str] | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    names = tasks if tasks is not None else sorted({r["task_id"] for r in records})
    env = records[0]["env"] if records else "toy"
    (run_dir / "run.json").write_bytes(orjson.dumps({"run_id": "test-run", "repeats": repeats,
                                                     "config": {"model": "m"}, "envs": {}}))
    (run_dir / "tasks.jsonl").write_bytes(b"".join(orjson.dumps({"id": t, "env": env}) + b"\n" for t in names))
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return run_dir


def token_calls(*, drift: bool = False) -> list[dict[str, Any]]:
    """Two model calls with ids, logprobs and pieces; the second prompt extends the first unless ``drift``."""
    p1, g1 = [1, 2, 3], [10, 11]
    p2 = p1 + g1 + [20, 21] if not drift else [1, 2, 9, 10, 11, 20]
    g2 = [30, 31, 32]

    def response(pieces: list[str], lps: list[float]) -> dict[str, Any]:
        content = [{"token": t, "logprob": lp} for t, lp in zip(pieces, lps, strict=True)]
        return {"choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": "".join(pieces)},
                             "logprobs": {"content": content}}]}

    return [
        {"api": "chat", "status": 200, "latency_s": 0.1, "usage": {"prompt_tokens": 3, "completion_tokens": 2},
         "prompt_token_ids": p1, "generation_token_ids": g1, "generation_logprobs": [-0.1, -2.5],
         "response": response(["Hel", "lo"], [-0.1, -2.5])},
        {"api": "chat", "status": 200, "latency_s": 0.1, "usage": {"prompt_tokens": 7, "completion_tokens": 3},
         "prompt_token_ids": p2, "generation_token_ids": g2, "generation_logprobs": [-0.01, -0.7, -4.0],
         "response": response([" wor", "ld", "<b>!</b>"], [-0.01, -0.7, -4.0])},
    ]


def mixed_records() -> list[dict[str, Any]]:
    """Four tasks × two repeats: passes, a partial reward, a retried failure, an unrecovered timeout-ish
    failure, an XSS payload in a message, and token ids on one rollout."""
    return [
        rollout("alpha", 0, model_calls=token_calls()),
        rollout("alpha", 1),
        rollout("beta", 0, reward=0.5),
        rollout("beta", 1, reward=0.0, content=XSS),
        rollout("gamma", 0, kind="environment"),
        rollout("gamma", 0, attempt=1, reward=1.0),
        rollout("gamma", 1, reward=1.0),
        rollout("delta", 0, kind="sandbox"),
        rollout("delta", 1, reward=0.25, model_calls=token_calls(drift=True)),
    ]


@pytest.fixture
def mixed_run(tmp_path: Path) -> Path:
    return write_run(tmp_path / "mixed", mixed_records())


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: `eval run` on the bundled mcqa tasks with a scripted policy that fails 20% of calls."""
    from palaestra.orchestrator import run_eval
    from palaestra.rollout.config import RunConfig

    out = tmp_path_factory.mktemp("real") / "run"
    cfg = RunConfig(env="mcqa", model="scripted:oracle?failure_rate=0.2", repeats=2, limit=8, max_attempts=2,
                    out=str(out), seed=1)
    # in a thread of its own: the sync Playwright API keeps an event loop running in this one
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(run_eval(cfg))).result()
    return out


@pytest.fixture
def artifacts() -> Iterator[Path]:
    """Where browser tests leave screenshots (git-ignored: tests/report/artifacts/)."""
    path = Path(os.environ.get("PALAESTRA_TEST_ARTIFACTS", Path(__file__).parent / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    yield path
