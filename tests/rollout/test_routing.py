"""Model routing: per-request strategies and the cascade, with what each model answered and cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from palaestra.core.errors import ConfigError
from palaestra.core.records import Task
from palaestra.models.base import CallContext
from palaestra.models.router import RouterBackend, parse_route
from palaestra.models.scripted import ScriptedBackend
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig

MODELS = {"cheap": "scripted:oracle?accuracy=0.4&seed=1", "strong": "scripted:oracle"}


async def _run(tmp_path: Path, name: str, model: str) -> dict:
    result = await run_eval(RunConfig(env="mcqa", model=model, models=MODELS, repeats=1, out=str(tmp_path / name),
                                      model_prices={"cheap": 0.1, "strong": 10.0}))
    return result.metrics


async def test_cascade_beats_cheap_accuracy_and_spends_fewer_strong_calls(tmp_path: Path) -> None:
    cheap = await _run(tmp_path, "cheap", "cheap")
    strong = await _run(tmp_path, "strong", "strong")
    cascade = await _run(tmp_path, "cascade", "router:cascade?to=cheap,strong")
    acc = {k: m["overall"]["mean_reward"] for k, m in [("cheap", cheap), ("strong", strong), ("cascade", cascade)]}
    assert acc["cheap"] < acc["cascade"] == acc["strong"] == 1.0
    strong_calls_alone = strong["model_usage"]["strong"]["calls"]
    strong_calls_cascade = cascade["model_usage"]["strong"]["calls"]
    assert 0 < strong_calls_cascade < strong_calls_alone
    assert cascade["model_usage"]["cheap"]["calls"] == 25
    assert cascade["model_usage"]["strong"]["cost"] < strong["model_usage"]["strong"]["cost"]
    records = [json.loads(x) for x in (tmp_path / "cascade" / "rollouts.jsonl").read_text().splitlines()]
    escalated = [r for r in records if len(r["routing"]) == 2]
    assert len(escalated) == strong_calls_cascade
    assert all(r["routing"][0]["passed"] is False and r["routing"][1]["passed"] for r in escalated)
    assert all({c["routed_to"] for c in r["trajectory"]["model_calls"]} == {"cheap", "strong"} for r in escalated)


async def test_split_is_sticky_per_rollout_and_tag_routes_by_tag() -> None:
    backends = {"a": ScriptedBackend("constant", constant_text="A"), "b": ScriptedBackend("constant",
                                                                                          constant_text="B")}
    split = RouterBackend(parse_route("router:split?to=a,b&weights=1,1", {"a": "x", "b": "y"}), backends)
    picks = {split.pick(CallContext(rollout_id=f"r{i}")) for i in range(50)}
    assert picks == {"a", "b"}
    ctx = CallContext(rollout_id="r7")
    assert len({split.pick(ctx) for _ in range(5)}) == 1
    tag = RouterBackend(parse_route("router:tag?map=hard:b&default=a", {"a": "x", "b": "y"}), backends)
    hard = await tag.chat({"messages": []}, CallContext(task=Task(id="t", tags=["hard"])))
    easy = await tag.chat({"messages": []}, CallContext(task=Task(id="u", tags=["easy"])))
    assert (hard["choices"][0]["message"]["content"], hard["palaestra_routed_to"]) == ("B", "b")
    assert (easy["choices"][0]["message"]["content"], easy["palaestra_routed_to"]) == ("A", "a")


def test_bad_routes_are_clear() -> None:
    with pytest.raises(ConfigError, match="unknown routing strategy"):
        parse_route("router:best?to=a", {"a": "x"})
    with pytest.raises(ConfigError, match=r"routes to \['zz'\]"):
        parse_route("router:fixed?to=zz", {"a": "x"})
    with pytest.raises(ConfigError, match="weights"):
        parse_route("router:split?to=a&weights=1,2", {"a": "x"})
