"""The end of a run reads its journal once for metrics.json and report.html (rollout.results.JournalRead).

The report built from that one read must be the very page the viewer's own reading of the journal gives,
for a clean run and for a damaged one: torn and garbage lines, a record that is JSON but not a Rollout,
and records whose task has gone from tasks.jsonl (shown with a placeholder, not dropped)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from palaestra.orchestrator import write_metrics
from palaestra.report.rundata import load_run_info
from palaestra.report.static import DEFAULT_DETAIL_BYTES, TranscriptCache, build_report, write_report
from palaestra.rollout.results import read_rollouts, read_run_journal
from palaestra.rollout.tasks import read_tasks

from .conftest import mixed_records, write_run


def _both(run_dir: Path) -> tuple[str, str]:
    """The report through the viewer's index, and through one read of the journal. The latter is also
    built with the transcripts the read-back encoded (``TranscriptCache``), whole and cut short by a
    small budget: a cache, so the page must not change with it."""
    info = load_run_info(run_dir)
    via_read = build_report(info, journal=read_run_journal(info.journal))
    assert isinstance(via_read, bytes)
    for budget in (DEFAULT_DETAIL_BYTES, 3000):
        cache = TranscriptCache(budget)
        read = read_run_journal(info.journal, on_expanded=cache.add)
        assert cache.encoded and cache.used <= budget
        assert budget == DEFAULT_DETAIL_BYTES or len(cache.encoded) < len(read.records)  # the small one filled
        assert build_report(info, journal=read, transcripts=cache) == via_read
    return build_report(info).decode(), via_read.decode()


def test_one_read_gives_the_same_report_on_a_real_run(real_run: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(real_run, tmp_path / "run"))
    via_index, via_read = _both(run)
    assert via_index == via_read
    read = read_run_journal(run / "rollouts.jsonl")
    assert len(read.records) == len(read.counted) == len(read.rows) > 0
    assert read.rollouts == []  # mcqa has no metrics hook and the model returned no token ids: no Rollout built
    assert read.problems == [] and read.invalid == []
    assert '"compact"' in (run / "rollouts.jsonl").read_text()  # the run wrote compact records: expansion ran


def _long_question_run(tmp_path: Path) -> Path:
    """A real run whose questions are long enough that its records reference them in tasks.jsonl."""
    from palaestra.envs.registry import load_env
    from palaestra.orchestrator import run_eval
    from palaestra.rollout.config import RunConfig

    rows = tmp_path / "rows.jsonl"
    with rows.open("w") as fh:
        for i, t in enumerate(load_env("mcqa").examples()[:3]):
            long = t.model_copy(update={"id": f"long-{i}", "input": f"{t.input} " + "Think it over. " * 30})
            fh.write(long.model_dump_json() + "\n")
    cfg = RunConfig(input=str(rows), model="scripted:oracle", agent="single", out=str(tmp_path / "run"), seed=1)
    asyncio.run(run_eval(cfg))
    return tmp_path / "run"


def test_one_read_gives_the_same_report_on_a_damaged_journal(tmp_path: Path) -> None:
    run = _long_question_run(tmp_path)
    assert '"task":' in (run / "rollouts.jsonl").read_text()  # records reference their task's text
    journal = run / "rollouts.jsonl"
    with journal.open("ab") as fh:
        fh.write(b"{not json\n")
        fh.write(orjson.dumps({"rollout_id": "x", "task_id": "nope"}) + b"\n")  # JSON, not a Rollout
        fh.write(b'{"torn": ')  # a crash mid-append
    # every task gone from the snapshot: compact records can no longer be expanded strictly
    tasks = run / "tasks.jsonl"
    kept = tasks.read_bytes().splitlines()[:1]
    tasks.write_bytes(b"\n".join(kept) + b"\n")
    read = read_run_journal(journal)
    assert any("invalid JSON" in p for p in read.problems) and any("torn" in p for p in read.problems)
    assert any("cannot be expanded" in p for p in read.invalid), read.invalid
    assert any("not a Rollout" in p for p in read.invalid), read.invalid
    # as at the end of a run: metrics.json from the same read first (the report then shows its problems)
    metrics = write_metrics(run, read_tasks(run / "tasks.jsonl"), 1, journal=read)
    assert metrics["journal_unreadable"] == len(read.problems) + len(read.invalid) == 5
    via_index, via_read = _both(run)
    assert via_index == via_read
    assert "placeholder" not in via_read and "not available" in via_read  # the missing texts, said so
    every = read_run_journal(journal, every_rollout=True)  # as reverify reads it: a Rollout of every record
    assert read_rollouts(journal) == (every.records, every.rollouts, every.problems, every.invalid)
    assert every.invalid == read.invalid and len(every.rollouts) == len(read.counted) > 0


def test_metrics_and_report_from_one_read_match_separate_reads(tmp_path: Path) -> None:
    run = write_run(tmp_path / "mixed", mixed_records())
    tasks = read_tasks(run / "tasks.jsonl")
    separate = write_metrics(run, tasks, 2)
    write_report(run)
    html_separate = (run / "report.html").read_text()
    read = read_run_journal(run / "rollouts.jsonl")
    shared = write_metrics(run, tasks, 2, journal=read)
    write_report(run, journal=read)
    assert shared == separate
    assert (run / "report.html").read_text() == html_separate
    assert shared["overall"]["n_failed"] and shared["overall"]["n_rollouts_scored"] == 7


def test_the_read_back_runs_with_the_collector_paused_and_leaves_it_as_it_was() -> None:
    """``gc_paused`` (around the end of a run: read back, metrics, report) turns the cyclic collector off
    and puts back what it found, also when the block raises, and never turns on one that was off."""
    import gc

    from palaestra.rollout.results import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("a report bug")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize(("env", "agent"), [("mcqa", "single"), ("workplace", "tool")])
def test_the_end_of_a_run_takes_its_own_records_from_memory_and_writes_what_a_fresh_read_gives(
        env: str, agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The end of a run takes the records it collected from what its journal kept (checked against the
    file's bytes) and the transcripts encoded as each was journaled. Its metrics.json and report.html
    must be those a fresh read of the journal gives, for a first session and for a resumed one (whose
    own records follow an earlier session's, read from the file); single-turn, and multi-turn tool use
    (records whose requests compaction shortened the most)."""
    from palaestra import orchestrator
    from palaestra.orchestrator import run_eval
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.results import JournalRead

    reads: list[JournalRead] = []

    def spy(*args: object, **kwargs: object) -> JournalRead:
        read = read_run_journal(*args, **kwargs)  # type: ignore[arg-type]
        reads.append(read)
        return read

    monkeypatch.setattr(orchestrator, "read_run_journal", spy)
    # nor does its report read back what the run has just written: metrics.json, or tasks.jsonl for the
    # expected slots (the fresh report below reads both, and must give the same page)
    from palaestra.report import rundata

    read_back: list[str] = []
    stored, expected = rundata.stored_metrics, rundata._expected
    monkeypatch.setattr(rundata, "stored_metrics", lambda *a: read_back.append("metrics.json") or stored(*a))
    monkeypatch.setattr(rundata, "_expected", lambda *a: read_back.append("tasks.jsonl") or expected(*a))
    out = tmp_path / "run"
    base = {"env": env, "agent": agent, "model": "scripted:oracle?failure_rate=0.3", "repeats": 2, "limit": 6,
            "out": str(out), "seed": 3}
    for session, attempts in enumerate((1, 3)):  # the second resumes the slots the first left failed
        before = len(read_journal_records(out))
        result = asyncio.run(run_eval(RunConfig(**base, max_attempts=attempts)))  # type: ignore[arg-type]
        assert result.collected > 0, session
        assert read_back == [], read_back
        read = reads[-1]
        assert read.kept_from == before and len(read.records) > before  # its own records: from memory
        written = orjson.loads((out / "metrics.json").read_bytes())
        assert orjson.loads(orjson.dumps(write_metrics(out, read_tasks(out / "tasks.jsonl"), 2))) == written
        fresh = write_report(out, out=tmp_path / f"fresh-{session}.html")  # read through the viewer's index
        assert read_back == ["tasks.jsonl", "metrics.json"]
        read_back.clear()
        assert fresh.read_text() == (out / "report.html").read_text()
    metrics = orjson.loads((out / "metrics.json").read_bytes())
    assert metrics["overall"]["n_rollouts_scored"] > 0 and metrics["journal_unreadable"] == 0


def read_journal_records(run_dir: Path) -> list[dict[str, object]]:
    from palaestra.rollout.journal_read import read_journal

    return read_journal(run_dir / "rollouts.jsonl", missing_ok=True)[0]
