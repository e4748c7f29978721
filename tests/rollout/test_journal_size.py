"""Journal size: a task is stored once per run (tasks.jsonl), and records reference it.

Each record is compacted on its way into the journal (rollout/compact.py) and expanded by every reader;
these tests check that the journal stays small for a huge prompt, that expansion gives back exactly
what the model received and what the rollout held in memory, and that the report and the training
exports read a compact journal exactly as they read the same records written whole.
"""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from palaestra.agents.registry import make_agent
from palaestra.core.records import Rollout, Task
from palaestra.envs.registry import load_env_class
from palaestra.models.base import CallContext
from palaestra.models.scripted import ScriptedBackend
from palaestra.orchestrator import run_eval
from palaestra.placement import mount_env
from palaestra.report.detail import rollout_detail
from palaestra.report.index import JournalIndex
from palaestra.report.rundata import load_run_info
from palaestra.report.static import build_report
from palaestra.rollout import rundir
from palaestra.rollout.compact import (
    MIN_TEXT,
    CompactError,
    RunTasks,
    compact_record,
    compact_rollout,
    expand_record,
    read_expanded,
)
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal import encode_record
from palaestra.rollout.runner import run_rollout
from palaestra.rollout.tasks import write_tasks
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.export import export_run


def _json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _roundtrip(rollout: Rollout, task: Task | None) -> dict[str, Any]:
    """Journal a rollout (compact), read the line back and expand it, as every reader does."""
    line = encode_record(compact_rollout(rollout, task))
    return expand_record(orjson.loads(line), {task.id: task} if task is not None else None)


class RecordingBackend:
    """A real backend (scripted oracle answers) that keeps a JSON copy of every request it is sent and,
    with ``tokens``, answers with token ids the way vLLM does: the prompt's ids are its messages'
    UTF-8 bytes, so a turn's prompt extends the previous prompt and reply exactly."""

    def __init__(self, *, tokens: bool = False) -> None:
        self.inner = ScriptedBackend("oracle")
        self.name = "recording-oracle"
        self.tokens = tokens
        self.seen: dict[str, list[dict[str, Any]]] = {}

    @staticmethod
    def _ids(messages: list[dict[str, Any]]) -> list[int]:
        return [b for m in messages for b in f"<{m.get('role')}>{m.get('content') or ''}".encode()]

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        self.seen.setdefault(str(ctx.rollout_id if ctx else None), []).append(_json(request))
        response = await self.inner.chat(request, ctx)
        if self.tokens:
            message = response["choices"][0]["message"]
            reply = self._ids([{"role": "assistant", "content": message.get("content") or ""}])
            response["prompt_token_ids"] = self._ids(request["messages"])
            response["choices"][0]["token_ids"] = reply
            response["choices"][0]["logprobs"] = {"content": [{"token": "x", "logprob": -0.5} for _ in reply]}
        return response


async def _rollouts(env_name: str, tasks: list[Task], backend: Any, repeats: int = 1,
                    agent: str = "tool") -> list[Rollout]:
    mounted = await mount_env(env_name, "inprocess")
    try:
        proxy = ModelProxy(backend)
        return [await run_rollout(t, env=mounted.client, agent=make_agent(agent, max_steps=16), proxy=proxy,
                                  model_name="recording", repeat=rep, with_reference=True)
                for t in tasks for rep in range(repeats)]
    finally:
        await mounted.stop()


def _big_math_task(chars: int) -> Task:
    preamble = "Read all of this carefully before you answer. " * (chars // 47 + 1)
    return Task(id="big", env="math", input=preamble[:chars] + "\nWhat is 48 + 76?",
                metadata={"expected_answer": "124"})


# ---- size ------------------------------------------------------------------------------------------

async def test_a_big_task_is_stored_once_per_run_not_in_every_record(tmp_path: Path) -> None:
    task = _big_math_task(2_000_000)
    size = len(task.input)
    src = tmp_path / "big.jsonl"
    src.write_bytes(orjson.dumps(task.model_dump(mode="json")) + b"\n")
    out = tmp_path / "run"
    result = await run_eval(RunConfig(input=str(src), model="scripted:oracle", out=str(out), repeats=3,
                                      agent="single"))
    assert result.metrics["overall"]["mean_reward"] == 1.0  # metrics read the compact records whole
    journal = (out / rundir.JOURNAL).stat().st_size
    assert (out / rundir.TASKS).stat().st_size > size  # the one copy
    assert journal < 0.1 * size, f"3 records take {journal} bytes for a {size}-character task"

    records, problems = read_expanded(out / rundir.JOURNAL)
    assert not problems and len(records) == 3
    for rec in records:
        rollout = Rollout.model_validate(rec)
        (call,) = rollout.trajectory.model_calls
        user = [m for m in call.request["messages"] if m["role"] == "user"]
        assert user == [{"role": "user", "content": task.input}]
        assert rollout.trajectory.messages[:len(call.request["messages"])] == call.request["messages"]
    index = JournalIndex(out / rundir.JOURNAL)
    index.advance()
    detail = rollout_detail(index.read_record(0), 0)
    assert detail["messages"][1]["content"].startswith("Read all of this")  # the viewer sees the prompt


async def test_expanded_requests_are_what_the_model_received() -> None:
    task = _big_math_task(50_000)
    backend = RecordingBackend()
    rollouts = await _rollouts("math", [task], backend, repeats=2, agent="single")
    for rollout in rollouts:
        compact = orjson.loads(encode_record(compact_rollout(rollout, task)))
        assert task.input not in orjson.dumps(compact).decode()  # no copy of the prompt at all
        assert compact["compact"]["task"]["id"] == "big"
        full = expand_record(compact, {task.id: task})
        assert [c["request"] for c in full["trajectory"]["model_calls"]] == backend.seen[rollout.rollout_id]
        assert orjson.dumps(full) == orjson.dumps(rollout.model_dump(mode="json"))


async def test_multi_turn_tool_rollouts_round_trip_exactly_and_store_each_turn_once() -> None:
    tasks = load_env_class("workplace")().examples()
    backend = RecordingBackend(tokens=True)
    rollouts = await _rollouts("workplace", tasks, backend)
    assert any(len(r.trajectory.model_calls) >= 3 for r in rollouts)
    whole = compact = 0
    for rollout, task in zip(rollouts, tasks):
        line = encode_record(compact_rollout(rollout, task))
        whole, compact = whole + len(encode_record(rollout)), compact + len(line)
        stored = orjson.loads(line)
        for k, call in enumerate(stored["trajectory"]["model_calls"][1:], 1):
            head = call["request"]["messages"][0]
            assert head == {"$prefix": "trajectory", "n": len(backend.seen[rollout.rollout_id][k]["messages"])}
            assert call["request"]["tools"] == {"$same": k - 1}
            marker = call["prompt_token_ids"][0]  # at least the whole previous prompt is referenced
            previous = RecordingBackend._ids(backend.seen[rollout.rollout_id][k - 1]["messages"])
            assert marker["$prefix"] == k - 1 and marker["n"] >= len(previous)
        full = expand_record(stored, {task.id: task})
        assert orjson.dumps(full) == orjson.dumps(rollout.model_dump(mode="json"))
        assert [c["request"] for c in full["trajectory"]["model_calls"]] == backend.seen[rollout.rollout_id]
    assert compact < 0.6 * whole


# ---- readers: identical output to whole records -------------------------------------------------------

def _write_run(d: Path, tasks: list[Task], lines: list[bytes]) -> Path:
    d.mkdir(parents=True)
    write_tasks(d / rundir.TASKS, tasks)
    rundir.write_json_atomic(d / rundir.RUN_JSON, rundir.run_manifest("r", {}, {}, len(tasks), 2))
    (d / rundir.JOURNAL).write_bytes(b"".join(lines))
    return d


async def test_report_and_exports_read_a_compact_journal_as_the_whole_one(tmp_path: Path) -> None:
    tasks = load_env_class("workplace")().examples()[:6]
    rollouts = await _rollouts("workplace", tasks, RecordingBackend(tokens=True), repeats=2)
    by_id = {t.id: t for t in tasks}
    compact_dir = _write_run(tmp_path / "compact" / "run", tasks,
                             [encode_record(compact_rollout(r, by_id[r.task_id])) for r in rollouts])
    whole_dir = _write_run(tmp_path / "whole" / "run", tasks, [encode_record(r) for r in rollouts])
    assert (compact_dir / rundir.JOURNAL).stat().st_size < (whole_dir / rundir.JOURNAL).stat().st_size

    for kind in ("sft", "rl", "dpo"):
        outs = []
        for d in (compact_dir, whole_dir):
            out = d.parent / f"{kind}.jsonl"
            try:
                export_run(kind, d, out)
            except Exception as exc:  # dpo needs differing rewards: both sides must refuse alike
                outs.append(f"{type(exc).__name__}: {exc}".replace(str(d), "RUN"))
                continue
            outs.append(out.read_text())
        assert outs[0] == outs[1], kind
        if kind != "dpo":
            assert isinstance(outs[0], str) and outs[0].count("\n") >= len(tasks)

    indexes = [JournalIndex(d / rundir.JOURNAL) for d in (compact_dir, whole_dir)]
    for index in indexes:
        index.advance()
    for seq in range(len(rollouts)):
        assert rollout_detail(indexes[0].read_record(seq), seq) == rollout_detail(indexes[1].read_record(seq), seq)
    # the two run.json files were written in different seconds: their "created" stamps may differ
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
    reports = [stamp.sub("CREATED", build_report(load_run_info(d)).decode().replace(str(d), "RUN"))
               for d in (compact_dir, whole_dir)]
    assert reports[0] == reports[1]


# ---- losslessness at the edges -----------------------------------------------------------------------

def _record(messages: list[dict[str, Any]], requests: list[dict[str, Any]], **call: Any) -> dict[str, Any]:
    calls = [{"api": "chat", "request": r, "response": None, **call} for r in requests]
    return {"schema_version": 2, "rollout_id": "r1", "task_id": "t", "env": "e", "agent": "a", "model": "m",
            "outcome": {"status": "scored"}, "trajectory": {"messages": messages, "model_calls": calls}}


def _check(rec: dict[str, Any], task: Task | None) -> dict[str, Any]:
    before = orjson.dumps(rec)
    stored = orjson.loads(orjson.dumps(compact_record(copy.deepcopy(rec), task)))
    assert orjson.dumps(expand_record(stored, {task.id: task} if task else None)) == before
    return stored


def test_values_python_calls_equal_but_json_does_not_are_kept_apart() -> None:
    a = {"role": "user", "content": "x", "n": 1}
    b = {"role": "user", "content": "x", "n": 1.0}
    c = {"content": "x", "role": "user", "n": 1}  # same keys, another order
    stored = _check(_record([a], [{"messages": [b]}, {"messages": [c]}, {"messages": [{**a, "n": True}]}]), None)
    assert all(call["request"]["messages"][0].get("$prefix") is None
               for call in stored["trajectory"]["model_calls"])


def test_literal_values_that_look_like_markers_survive() -> None:
    text = "q" * (MIN_TEXT + 10)
    task = Task(id="t", input=[{"role": "user", "content": text}])
    odd = [{"$prefix": "trajectory", "n": 5}, {"role": "user", "content": {"$task_text": 0, "n": 3}},
           {"role": "user", "content": [{"type": "text", "text": {"$literal": 1}}, {"type": "text", "text": text}]}]
    rec = _record([{"role": "user", "content": text}], [{"messages": odd, "tools": {"$same": 0}},
                                                        {"messages": odd, "tools": {"$literal": 2}}])
    _check(rec, task)
    _check(rec, None)


def test_environment_suffixes_and_stripped_texts_are_referenced() -> None:
    body = "Which is right? " * 40 + "  \n"
    task = Task(id="t", input=[{"role": "system", "content": "be brief"}, {"role": "user", "content": body}])
    shown = {"role": "user", "content": "Intro.\n" + body.rstrip() + "\n\nA) yes\nB) no"}
    rec = _record([{"role": "system", "content": "be brief"}, shown], [{"messages": [shown]}])
    stored = _check(rec, task)
    ref = stored["trajectory"]["messages"][1]["content"]
    assert ref == {"$task_text": 1, "n": len(body.rstrip()), "pre": "Intro.\n", "post": "\n\nA) yes\nB) no"}


def test_token_ids_that_drift_stay_exact() -> None:
    first = {"prompt_token_ids": list(range(100)), "generation_token_ids": [7] * 20}
    drifted = {"prompt_token_ids": list(range(60)) + [1] * 70, "generation_token_ids": [2]}
    rec = _record([], [{"messages": []}, {"messages": []}])
    for call, ids in zip(rec["trajectory"]["model_calls"], (first, drifted)):
        call.update(ids)
    stored = _check(rec, None)
    assert stored["trajectory"]["model_calls"][1]["prompt_token_ids"][0] == {"$prefix": 0, "n": 60}


def test_a_missing_or_changed_task_is_an_error_not_a_wrong_prompt(tmp_path: Path) -> None:
    task = Task(id="t", input="p" * 1000)
    rec = _record([{"role": "user", "content": task.input}], [{"messages": [{"role": "user", "content": task.input}]}])
    stored = orjson.loads(orjson.dumps(compact_record(copy.deepcopy(rec), task)))
    with pytest.raises(CompactError, match="not in the run's tasks.jsonl"):
        expand_record(stored, {})
    changed = Task(id="t", input="p" * 999 + "q")
    with pytest.raises(CompactError, match="differs"):
        expand_record(stored, {"t": changed})
    placeholder = expand_record(stored, {}, strict=False)
    assert "not available" in placeholder["trajectory"]["messages"][0]["content"]
    write_tasks(tmp_path / "tasks.jsonl", [Task(id="other", input="x"), task])
    assert orjson.dumps(expand_record(stored, RunTasks(tmp_path / "tasks.jsonl"))) == orjson.dumps(rec)


def test_records_written_before_compaction_read_as_they_are(tmp_path: Path) -> None:
    old = _record([{"role": "user", "content": "hi"}], [{"messages": [{"$prefix": "trajectory", "n": 1}]}])
    old["schema_version"] = 1
    assert expand_record(old, None) == old  # no ``compact`` key: a literal, however it looks
    small = _record([{"role": "user", "content": "hi"}], [{"messages": [{"role": "system", "content": "s"}]}])
    assert compact_record(copy.deepcopy(small), Task(id="t", input="hi")) == small  # nothing to compact


async def test_reverify_keeps_the_journal_compact_and_reads_it_whole(tmp_path: Path) -> None:
    from palaestra.rollout.reverify import REVERIFIED, reverify_run

    task = _big_math_task(20_000)
    src = tmp_path / "big.jsonl"
    src.write_bytes(orjson.dumps(task.model_dump(mode="json")) + b"\n")
    out = tmp_path / "run"
    await run_eval(RunConfig(input=str(src), model="scripted:oracle", out=str(out), repeats=2, agent="single"))
    result = await reverify_run(out)
    assert result.checked == 2 and not result.changed and result.failed == 0
    assert (out / REVERIFIED).stat().st_size < len(task.input)
    records, problems = read_expanded(out / REVERIFIED)
    assert not problems and all(r["verdict"]["reward"] == 1.0 for r in records)
    shutil.rmtree(out)


def test_requests_of_a_harness_that_keeps_no_trajectory_reference_the_call_before() -> None:
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}
    turn = [system, user, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
    stored = _check(_record([], [{"messages": [system, user]}, {"messages": turn}, {"messages": turn[:3]}]), None)
    calls = stored["trajectory"]["model_calls"]
    assert calls[1]["request"]["messages"] == [{"$prefix": 0, "n": 2}, *turn[2:]]
    assert calls[2]["request"]["messages"] == [{"$prefix": 1, "n": 3}]
