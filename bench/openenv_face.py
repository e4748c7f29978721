"""The OpenEnv face's figures (docs/openenv.md; a figure, not a test): every built-in environment served
with ``palaestra env serve ENV --openenv`` (a real server process on 127.0.0.1) and driven by OpenEnv's own
``GenericEnvClient``, its reference actions per task (oracle) and an empty answer (null); then the
throughput of one or more clients. Prints one JSON line per environment and per throughput run.

  python bench/openenv_face.py                         # every built-in environment, then throughput
  python bench/openenv_face.py math workplace          # only these
  python bench/openenv_face.py --throughput-only math  # skip the oracle sweep

Exits non-zero unless every environment's oracle scored 1 and its null 0 on every task with a reference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from openenv.core.generic_client import GenericEnvClient

from palaestra.envs.registry import load_env

TOKEN = secrets.token_urlsafe(32)
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
BUILT_IN = ["math", "mcqa", "ifeval", "json_schema", "sql", "tool_call", "workplace", "sokoban", "reasoning_gym",
            "code", "terminal", "judge", "arith", "arith_tools"]


@contextmanager
def served(name: str) -> Iterator[str]:
    """``palaestra env serve NAME --openenv --port 0`` until the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "palaestra.cli.main", "env", "serve", name, "--openenv",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PALAESTRA_TOKEN": TOKEN})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PALAESTRA_READY"):
            raise SystemExit(f"{name}: the server did not start ({line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(30)


async def episode(client: GenericEnvClient, env: Any, task: Any, oracle: bool) -> float:
    await client.reset(task_id=task.id)
    reference = env.reference(task)
    if oracle:
        for call in reference.tool_calls:
            await client.step({"type": "call_tool", "tool_name": call.name, "arguments": call.arguments})
    result = await client.step({"answer": (reference.final_answer or "") if oracle else ""})
    return float(result.reward)


async def sweep(name: str, url: str) -> dict[str, Any]:
    env = load_env(name)
    tasks = [t for t in env.examples() if env.reference(t) is not None]
    started = time.perf_counter()
    async with GenericEnvClient(base_url=url, headers=HEADERS) as client:
        oracle = [await episode(client, env, t, True) for t in tasks]
        null = [await episode(client, env, t, False) for t in tasks]
    return {"env": name, "tasks": len(tasks), "oracle_full": sum(r == 1.0 for r in oracle),
            "null_zero": sum(r == 0.0 for r in null), "seconds": round(time.perf_counter() - started, 2)}


async def throughput(name: str, url: str, episodes: int, clients: int) -> dict[str, Any]:
    env = load_env(name)
    tasks = [t for t in env.examples() if env.reference(t) is not None]

    async def one(k: int) -> tuple[float, int]:
        total, messages = 0.0, 0
        async with GenericEnvClient(base_url=url, headers=HEADERS) as client:
            for i in range(k, episodes, clients):
                task = tasks[i % len(tasks)]
                total += await episode(client, env, task, True)
                messages += 2 + len(env.reference(task).tool_calls)  # type: ignore[union-attr]
        return total, messages

    await one(0)  # warm-up: imports, first connection
    started = time.perf_counter()
    results = await asyncio.gather(*(one(k) for k in range(clients)))
    seconds = time.perf_counter() - started
    return {"env": name, "clients": clients, "episodes": episodes,
            "episodes_per_s": round(episodes / seconds, 1),
            "messages_per_s": round(sum(m for _, m in results) / seconds, 1),
            "mean_reward": sum(r for r, _ in results) / episodes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("envs", nargs="*", default=BUILT_IN)
    parser.add_argument("--episodes", type=int, default=240)
    parser.add_argument("--throughput-only", action="store_true")
    args = parser.parse_args()
    ok = True
    for name in args.envs if not args.throughput_only else []:
        with served(name) as url:
            row = asyncio.run(sweep(name, url))
        ok &= row["oracle_full"] == row["tasks"] == row["null_zero"]
        print(json.dumps(row), flush=True)
    for name in [n for n in ("math", "workplace") if n in args.envs]:
        with served(name) as url:
            for clients in (1, 8):
                print(json.dumps(asyncio.run(throughput(name, url, args.episodes, clients))), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
