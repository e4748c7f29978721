"""How fast does `palaestra view` show the first page of a 100,000-rollout journal?

Builds a synthetic run directory (realistic records: a system and a user message, one tool call and its
output, two model calls, a verdict, timings; a share of failures and retries), starts the viewer on
127.0.0.1 exactly as `palaestra view` does (uvicorn, cold index), and times:

* ``first_page_s``: from creating the app to having the page, its status, facets and the first 50 rows
  (everything the browser needs before it draws the list) — the acceptance figure, must be < 2 s;
* ``browser_first_row_s``: the same seen from headless Chromium (navigation until the first row is in the
  table), when Playwright and /usr/bin/chromium are available;
* ``index_complete_s``, ``filtered_query_ms`` (a task + outcome filter over everything), ``open_last_ms``
  (the transcript of the last record) and ``overview_s`` (all charts and metrics of 100k rollouts).

Usage: python bench/viewer.py [--n 100000] [--keep DIR]; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from palaestra.report.server import create_app
from palaestra.server.loopback import serve_app

CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _record(i: int, task: int, repeat: int, attempt: int, rng: random.Random) -> dict[str, Any]:
    failed = attempt == 0 and rng.random() < 0.03
    reward = round(rng.random(), 2) if rng.random() < 0.5 else float(rng.random() < 0.6)
    question = f"Task {task}: which of the options below is correct? " + "lorem ipsum dolor sit amet " * 8
    system = "You are a careful assistant. Use the tools when needed."
    messages: list[dict[str, Any]] = [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function",
                 "function": {"name": "search", "arguments": json.dumps({"query": f"topic {task}"})}}]},
                {"role": "tool", "tool_call_id": "c0", "content": "result " * 60},
                {"role": "assistant", "content": f"The answer is {'ABCD'[task % 4]}."}]
    model_call = {"api": "chat", "request": {"messages": messages[:2], "temperature": 1.0}, "status": 200,
                  "latency_s": rng.uniform(0.2, 3.0), "usage": {"prompt_tokens": 180, "completion_tokens": 24},
                  "response": {"choices": [{"finish_reason": "stop"}]}}
    return {
        "schema_version": 1, "rollout_id": f"{i:032x}", "task_id": f"task-{task:05d}", "env": "bench",
        "agent": "tool", "model": "bench-model", "repeat": repeat, "attempt": attempt,
        "outcome": {"status": "failed", "kind": "model", "message": "HTTP 503 from the model"} if failed
        else {"status": "scored", "kind": None, "message": None},
        "verdict": None if failed else {"reward": reward, "passed": reward >= 1.0, "components": {"exact": reward},
                                        "metadata": {}, "answer": "ABCD"[task % 4]},
        "trajectory": {"messages": messages,
                       "tool_calls": [{"name": "search", "arguments": {"query": f"topic {task}"},
                                       "output": "result " * 60, "status": "ok", "duration_s": 0.01}],
                       "model_calls": [model_call, model_call], "final_answer": messages[-1]["content"],
                       "steps": 2, "stop_reason": "final"},
        "usage": {"prompt_tokens": 360, "completion_tokens": 48, "model_calls": 2, "tool_calls": 1},
        "timings": {"seed_s": 0.01, "agent_s": rng.uniform(0.5, 6), "verify_s": 0.002, "close_s": 0.001,
                    "total_s": rng.uniform(0.6, 6.1)},
        "started_at": 1.8e9 + i,
    }


def build_run(run_dir: Path, n: int, repeats: int = 8, seed: int = 0) -> None:
    """A run directory with ``n`` journal records (failed attempts are retried, as the collector does)."""
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    n_tasks = max(1, n // repeats)
    (run_dir / "run.json").write_bytes(orjson.dumps({"run_id": "bench", "repeats": repeats, "config": {}}))
    with (run_dir / "tasks.jsonl").open("wb") as fh:
        for t in range(n_tasks):
            fh.write(orjson.dumps({"id": f"task-{t:05d}", "env": "bench", "input": "..."}) + b"\n")
    written = 0
    with (run_dir / "rollouts.jsonl").open("wb") as fh:
        while written < n:
            task, repeat = (written // repeats) % n_tasks, written % repeats
            rec = _record(written, task, repeat, 0, rng)
            fh.write(orjson.dumps(rec) + b"\n")
            written += 1
            if rec["outcome"]["status"] == "failed" and written < n:
                fh.write(orjson.dumps(_record(written, task, repeat, 1, rng)) + b"\n")
                written += 1


def _browser_first_row(url: str) -> float | None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path(CHROMIUM).exists():
        return None
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        page = browser.new_page()
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("#rows tbody tr.row", timeout=30_000)
        elapsed = time.perf_counter() - t0
        browser.close()
        return elapsed


def measure(run_dir: Path, *, browser: bool = True) -> dict[str, Any]:
    t0 = time.perf_counter()  # server start-up counts toward the first page
    app = create_app(run_dir)
    out: dict[str, Any] = {}
    with serve_app(app, lifespan="auto") as base, httpx.Client(base_url=base, timeout=60) as client:
        html = client.get("/")
        client.get("/api/status").raise_for_status()
        client.get("/api/facets").raise_for_status()
        first = client.get("/api/rows", params={"offset": 0, "limit": 50}).json()
        out["first_page_s"] = round(time.perf_counter() - t0, 3)
        out["first_page_rows"] = len(first["rows"])
        out["page_bytes"] = len(html.content)
        if browser:
            t = _browser_first_row(base + "/")
            out["browser_first_row_s"] = round(t, 3) if t is not None else None
        while not client.get("/api/status").json()["complete"]:
            time.sleep(0.05)
        out["index_complete_s"] = round(time.perf_counter() - t0, 3)
        status = client.get("/api/status").json()
        out["records"] = status["records"]
        t = time.perf_counter()
        hit = client.get("/api/rows", params={"task": "task-00042", "outcome": "scored", "limit": 50}).json()
        out["filtered_query_ms"] = round(1000 * (time.perf_counter() - t), 1)
        out["filtered_matches"] = hit["matched"]
        t = time.perf_counter()
        client.get(f"/api/rollout/{status['records'] - 1}").raise_for_status()
        out["open_last_ms"] = round(1000 * (time.perf_counter() - t), 1)
        t = time.perf_counter()
        client.get("/api/overview").raise_for_status()
        out["overview_s"] = round(time.perf_counter() - t, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="journal records")
    ap.add_argument("--keep", type=Path, help="build the run here and keep it")
    ap.add_argument("--no-browser", action="store_true", help="skip the Chromium measurement")
    args = ap.parse_args()
    tmp = None if args.keep else Path(tempfile.mkdtemp(prefix="palaestra-bench-view-"))
    run_dir = args.keep or (tmp / "run")  # type: ignore[operator]
    try:
        t = time.perf_counter()
        build_run(run_dir, args.n)
        built = time.perf_counter() - t
        result = measure(run_dir, browser=not args.no_browser)
        size = (run_dir / "rollouts.jsonl").stat().st_size
        result = {"bench": "viewer", "n": args.n, "journal_mb": round(size / 1e6, 1),
                  "build_s": round(built, 2), **result, "target_first_page_s": 2.0,
                  "ok": result["first_page_s"] < 2.0}
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
