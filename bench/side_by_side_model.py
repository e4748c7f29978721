"""The instant model of ``bench/side_by_side.py``: Palaestra's scripted oracle server, plus counters.

It is the very app ``palaestra model serve --backend scripted --policy oracle --env mcqa`` serves
(Chat Completions and the Responses API, which NeMo Gym's ``openai_model`` server calls), so it answers
every mcqa row built from the bundled tasks with the right ``\\boxed{letter}``. Around it sits a thin
ASGI layer that notes when the first model request arrived and when the last response left; that window
is how both tools' collection throughput is measured, from the model's side, in the same way.

    python bench/side_by_side_model.py --port 18100 [--latency-ms 0]
    GET /stats -> {"requests", "in_flight_max", "first_request_t", "last_response_t", "pid"}; POST /stats/reset

Binds 127.0.0.1 only. Runs in a process of its own, so its CPU is kept out of both tools' figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MODEL_PATHS = ("/responses", "/chat/completions", "/messages")


class ModelStats:
    """Counters of model calls; times are epoch seconds so another process can line them up with its own."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.in_flight = 0
        self.in_flight_max = 0
        self.first_request_t: float | None = None
        self.last_response_t: float | None = None

    def as_dict(self) -> dict[str, Any]:
        import os

        return {"requests": self.requests, "in_flight": self.in_flight, "in_flight_max": self.in_flight_max,
                "first_request_t": self.first_request_t, "last_response_t": self.last_response_t,
                "pid": os.getpid()}


class CountingApp:
    """Counts model calls on their way through to ``app`` and answers ``/stats`` itself."""

    def __init__(self, app: ASGIApp, stats: ModelStats) -> None:
        self.app = app
        self.stats = stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if path in ("/stats", "/stats/reset"):
            if path == "/stats/reset" and scope.get("method") == "POST":
                self.stats.reset()
            body = orjson.dumps(self.stats.as_dict())
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        if not path.endswith(MODEL_PATHS):
            await self.app(scope, receive, send)
            return
        stats = self.stats
        stats.requests += 1
        stats.in_flight += 1
        stats.in_flight_max = max(stats.in_flight_max, stats.in_flight)
        if stats.first_request_t is None:
            stats.first_request_t = time.time()
        done = False

        async def counted_send(message: Message) -> None:
            nonlocal done
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body") and not done:
                done = True
                stats.in_flight -= 1
                stats.last_response_t = time.time()

        try:
            await self.app(scope, receive, counted_send)
        finally:
            if not done:
                stats.in_flight -= 1


def build_app(latency_ms: float = 0.0, envs: tuple[str, ...] = ("mcqa",)) -> CountingApp:
    """The scripted oracle (knowing ``envs``' bundled tasks) behind Palaestra's model app, counted."""
    from palaestra.envs.oracle import oracle_references
    from palaestra.models.factory import make_backend
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy

    backend = make_backend("scripted:oracle", latency_ms=latency_ms, references=oracle_references(envs))
    return CountingApp(create_model_app(ModelProxy(backend)), ModelStats())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--env", action="append", default=None, help="environments the oracle knows (mcqa)")
    args = parser.parse_args(argv)
    import uvicorn

    app = build_app(args.latency_ms, tuple(args.env or ["mcqa"]))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
