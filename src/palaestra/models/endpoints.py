"""One model served by many inference servers: ``--model http://a:8000/v1,http://b:8000/v1``.

Requests go to the healthy endpoint with the fewest requests in flight, and stay on the endpoint a
rollout started on (its prefix cache holds the conversation so far). An endpoint that fails to answer
(connection refused, timeout, 5xx) is taken out for a cool-down that doubles on each failure, then
given one trial request (half-open); a background probe of ``GET /models`` brings a recovered one back
sooner. A request that hit a dead endpoint is retried on another, so one server dying loses nothing."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from palaestra.core.errors import ConfigError, ModelError
from palaestra.core.secrets import redact_url
from palaestra.models.base import CallContext
from palaestra.models.openai_http import OpenAIBackend

STICKY_MAX = 100_000  # rollouts remembered for stickiness (oldest forgotten first)


@dataclass
class Endpoint:
    url: str
    backend: OpenAIBackend
    in_flight: int = 0
    healthy: bool = True
    failures: int = 0
    retry_at: float = 0.0
    served: int = 0
    errors: list[str] = field(default_factory=list)

    def available(self, now: float) -> bool:
        return self.healthy or now >= self.retry_at


def split_urls(spec: str) -> list[str]:
    return [u.strip() for u in spec.split(",") if u.strip()]


class EndpointPool:
    """A ``ModelBackend`` over several OpenAI-compatible base URLs serving the same model."""

    def __init__(self, urls: list[str], *, cooldown_s: float = 2.0, max_cooldown_s: float = 60.0,
                 probe_interval_s: float = 5.0, max_failovers: int | None = None, **backend_kw: Any) -> None:
        if len(urls) < 1:
            raise ConfigError("an endpoint pool needs at least one base URL")
        self.endpoints = [Endpoint(u, OpenAIBackend(u, max_retries=0, **backend_kw)) for u in urls]
        self.name = "pool:" + ",".join(redact_url(u) for u in urls)
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.probe_interval_s = probe_interval_s
        self.max_failovers = max_failovers if max_failovers is not None else 2 * len(urls)
        self._sticky: OrderedDict[str, Endpoint] = OrderedDict()
        self._probe: asyncio.Task[None] | None = None

    def pick(self, rollout_id: str | None) -> Endpoint:
        now = time.monotonic()
        sticky = self._sticky.get(rollout_id) if rollout_id else None
        if sticky is not None and sticky.available(now):
            return sticky
        candidates = [e for e in self.endpoints if e.available(now)]
        if not candidates:  # all out: try the one that comes back soonest rather than fail at once
            candidates = [min(self.endpoints, key=lambda e: e.retry_at)]
        chosen = min(candidates, key=lambda e: (not e.healthy, e.in_flight, e.served))
        if rollout_id:
            self._sticky[rollout_id] = chosen
            self._sticky.move_to_end(rollout_id)
            while len(self._sticky) > STICKY_MAX:
                self._sticky.popitem(last=False)
        return chosen

    def _mark_down(self, ep: Endpoint, error: ModelError) -> None:
        ep.healthy = False
        ep.failures += 1
        ep.retry_at = time.monotonic() + min(self.max_cooldown_s, self.cooldown_s * 2 ** (ep.failures - 1))
        ep.errors = [*ep.errors[-4:], error.message]
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._probe_loop())

    def _mark_up(self, ep: Endpoint) -> None:
        ep.healthy, ep.failures = True, 0

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        rid = ctx.rollout_id if ctx else None
        last: ModelError | None = None
        for _ in range(self.max_failovers + 1):
            ep = self.pick(rid)
            ep.in_flight += 1
            try:
                response = await ep.backend.chat(request, ctx)
            except ModelError as exc:
                last = exc
                if exc.status is not None and exc.status < 500 and exc.status != 429:
                    raise  # the request itself is wrong: another endpoint would say the same
                if exc.status != 429:
                    self._mark_down(ep, exc)
                if rid:
                    self._sticky.pop(rid, None)
                continue
            finally:
                ep.in_flight -= 1
            ep.served += 1
            if not ep.healthy:
                self._mark_up(ep)
            response["palaestra_endpoint"] = redact_url(ep.url)
            return response
        assert last is not None
        raise ModelError(f"no endpoint of {self.name} answered: {last.message}",
                         hint="check the inference servers; unhealthy ones are retried after a cool-down")

    async def _probe_loop(self) -> None:
        """While any endpoint is down, ask each down one for ``/models``; an answer brings it back."""
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while any(not e.healthy for e in self.endpoints):
                await asyncio.sleep(self.probe_interval_s)
                for ep in [e for e in self.endpoints if not e.healthy]:
                    try:
                        async with session.get(ep.url.rstrip("/") + "/models") as resp:
                            if resp.status < 500:
                                self._mark_up(ep)
                    except (aiohttp.ClientError, asyncio.TimeoutError):
                        pass

    def status(self) -> list[dict[str, Any]]:
        return [{"url": redact_url(e.url), "healthy": e.healthy, "in_flight": e.in_flight, "served": e.served,
                 "failures": e.failures, "last_errors": e.errors} for e in self.endpoints]

    async def aclose(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        for ep in self.endpoints:
            await ep.backend.aclose()
