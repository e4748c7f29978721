"""Model routing (Switchyard): one ``--model`` that sends each request to one of several named models.

Per-request strategies live here: ``fixed`` (always one), ``tag`` (by the task's tags), ``split`` (a
weighted random choice, sticky per rollout so a rollout's turns hit one model and its prefix cache).
``cascade`` (cheap model first, escalate on a failed verify or low confidence) needs the verdict, so it
runs at the rollout level (``rollout/cascade.py``); this module only parses its spec.
Every response names the model that answered (``palaestra_routed_to``), and the proxy records it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.errors import ConfigError
from palaestra.models.base import CallContext, ModelBackend
from palaestra.plugins.spec import Converter, list_of, parse_spec

STRATEGIES = ("fixed", "tag", "split", "cascade")
ROUTED_TO = "palaestra_routed_to"
# Options of a router spec, typed by the one spec grammar (its errors name the bad option).
ROUTE_OPTIONS: dict[str, Converter | type] = {"to": list_of(str), "weights": list_of(float), "map": list_of(str),
                                              "default": str, "min_confidence": float}


@dataclass
class RouteSpec:
    strategy: str
    to: list[str]
    weights: list[float] = field(default_factory=list)
    tag_map: dict[str, str] = field(default_factory=dict)
    default: str | None = None
    min_confidence: float | None = None


def is_router(spec: str) -> bool:
    return spec.startswith("router:")


def parse_route(spec: str, known: dict[str, str]) -> RouteSpec:
    """``router:STRATEGY?to=a,b&weights=..&map=tag:name,..&default=..&min_confidence=..``; names are
    keys of the run's ``models`` table."""
    parsed = parse_spec(spec, what="model")
    strategy = parsed.name
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown routing strategy '{strategy}' in '{spec}'", hint=f"use one of {STRATEGIES}")
    opts = parsed.typed(ROUTE_OPTIONS)
    tag_map = dict(pair.split(":", 1) for pair in opts.get("map", []) if ":" in pair)
    to = opts.get("to") or sorted(set(tag_map.values()))
    route = RouteSpec(strategy, to, tag_map=tag_map, default=opts.get("default"))
    if "weights" in opts:
        route.weights = opts["weights"]
        if len(route.weights) != len(to) or min(route.weights, default=-1) < 0 or sum(route.weights) <= 0:
            raise ConfigError(f"'{spec}': weights must be one non-negative number per model in 'to'")
    route.min_confidence = opts.get("min_confidence")
    names = set(to) | set(tag_map.values()) | ({route.default} if route.default else set())
    unknown = sorted(n for n in names if n not in known)
    if not to or unknown:
        raise ConfigError(f"'{spec}' routes to {unknown or 'no model'}",
                          hint=f"name models defined in the run's `models` table: {sorted(known) or '(none)'}")
    if strategy == "fixed" and len(to) != 1:
        raise ConfigError(f"'{spec}': the fixed strategy takes exactly one model in 'to'")
    return route


class RouterBackend:
    """Per-request routing over named backends (fixed, tag, split)."""

    def __init__(self, route: RouteSpec, backends: dict[str, ModelBackend]) -> None:
        if route.strategy == "cascade":
            raise ConfigError("the cascade strategy runs per rollout, not per request (rollout/cascade.py)")
        self.route = route
        self.backends = backends
        self.name = f"router:{route.strategy}"

    def pick(self, ctx: CallContext) -> str:
        r = self.route
        if r.strategy == "tag":
            tags = ctx.task.tags if ctx.task is not None else []
            return next((r.tag_map[t] for t in tags if t in r.tag_map), r.default or r.to[0])
        if r.strategy == "split":
            weights = r.weights or [1.0] * len(r.to)
            key = ctx.rollout_id or (ctx.task.id if ctx.task is not None else "")
            draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64 * sum(weights)
            for name, w in zip(r.to, weights):
                if draw < w:
                    return name
                draw -= w
            return r.to[-1]
        return r.to[0]

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        name = self.pick(ctx)
        response = await self.backends[name].chat(request, ctx)
        response[ROUTED_TO] = name
        return response

    async def aclose(self) -> None:
        for backend in self.backends.values():
            await backend.aclose()
