"""Many endpoints for one model: load-balanced, sticky per rollout, failover when a server dies."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import uvicorn

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.records import Reference, Task, ToolCall
from palaestra.models.endpoints import EndpointPool
from palaestra.models.scripted import ScriptedBackend, reference_key
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.server.ports import free_port

COUNTER = str(Path(__file__).parents[1] / "fixtures" / "counter_env.py") + ":CounterEnv"
TASK_INPUT = "Bring the counter from 0 to 150."
REFERENCE = Reference(tool_calls=[ToolCall(name="add", arguments={"amount": 100}),
                                  ToolCall(name="add", arguments={"amount": 50})], final_answer="150")


class ModelServer:
    """A scripted oracle model server on 127.0.0.1 that a test can stop and start again on its port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        refs = {reference_key([{"role": "user", "content": TASK_INPUT}]): REFERENCE}
        app = create_model_app(ModelProxy(ScriptedBackend("oracle", latency_ms=20, references=refs)))
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            threading.Event().wait(0.01)

    def stop(self) -> None:
        assert self.server is not None and self.thread is not None
        self.server.should_exit = True
        self.server.force_exit = True
        self.thread.join(10)


async def test_pool_balances_sticks_and_fails_over() -> None:
    a, b = ModelServer(), ModelServer()
    a.start()
    b.start()
    pool = EndpointPool([a.url, b.url], cooldown_s=0.2, probe_interval_s=0.2)
    proxy = ModelProxy(pool)
    env = await mount_env(COUNTER, "direct")
    agent = ToolAgent()
    try:
        meta = {"start": 0, "target": 150}
        tasks = [Task(id=f"t{i}", env="counter", input=TASK_INPUT, metadata=meta) for i in range(60)]

        async def batch() -> list:
            return list(await asyncio.gather(*(run_rollout(t, env=env.client, agent=agent, proxy=proxy,
                                                           model_name="pool") for t in tasks)))

        rollouts = await batch()
        assert all(r.reward == 1.0 for r in rollouts)
        per_rollout = [{c.response["palaestra_endpoint"] for c in r.trajectory.model_calls} for r in rollouts]
        assert all(len(s) == 1 for s in per_rollout), "a rollout's turns moved between endpoints"
        load = Counter(next(iter(s)) for s in per_rollout)
        assert set(load) == {a.url, b.url} and min(load.values()) >= 15

        run = asyncio.create_task(batch())
        await asyncio.sleep(0.05)
        a.stop()  # dies with requests in flight
        rollouts = await run
        assert all(r.outcome.status == "scored" and r.reward == 1.0 for r in rollouts)
        assert not next(e for e in pool.endpoints if e.url == a.url).healthy

        a.start()  # it comes back: the probe (or the half-open trial) returns it to service
        for _ in range(100):
            if next(e for e in pool.endpoints if e.url == a.url).healthy:
                break
            await asyncio.sleep(0.05)
        assert next(e for e in pool.endpoints if e.url == a.url).healthy
    finally:
        await env.stop()
        await pool.aclose()
        for s in (a, b):
            if s.thread is not None and s.thread.is_alive():
                s.stop()
