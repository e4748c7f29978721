from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from palaestra.core.records import Outcome, Rollout, Verdict
from palaestra.rollout.journal import Journal, JournalError, repair
from palaestra.rollout.journal_read import read_journal


def rec(i: int, size: int = 50) -> dict[str, object]:
    return {"id": i, "payload": "x" * size, "nested": {"ü": [i, None, 1.5]}}


async def test_roundtrip_of_dicts_and_models(tmp_path: Path) -> None:
    path = tmp_path / "run" / "rollouts.jsonl"  # the parent directory is created
    rollout = Rollout(rollout_id="r1", task_id="t1", env="mcqa", agent="tool", model="m",
                      outcome=Outcome.scored(), verdict=Verdict(reward=1.0, answer="B"))
    async with Journal(path) as j:
        await j.append(rec(0))
        await j.append(rollout)
        assert j.records_written == 2 and j.fsyncs >= 1
    records, problems = read_journal(path)
    assert problems == []
    assert records[0] == rec(0)
    assert Rollout.model_validate(records[1]) == rollout
    assert records[1]["verdict"]["passed"] is None  # None fields are kept, not dropped
    assert path.read_bytes().count(b"\n") == 2


async def test_concurrent_appends_share_fsyncs(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    async with Journal(path) as j:
        await asyncio.gather(*(j.append(rec(i)) for i in range(2000)))
        assert j.records_written == 2000
        assert j.fsyncs < 200, j.fsyncs

        async def worker(w: int) -> None:  # appends that trickle in from many tasks
            for n in range(20):
                await j.append(rec(10_000 + w * 100 + n))
                await asyncio.sleep(0)

        before = j.fsyncs
        await asyncio.gather(*(worker(w) for w in range(50)))
        assert j.fsyncs - before < 1000
    records, problems = read_journal(path)
    assert problems == []
    assert len(records) == 3000 == len(path.read_bytes().splitlines())
    assert sorted(r["id"] for r in records)[:2000] == list(range(2000))


async def test_close_flushes_queued_appends_and_cancelled_callers_do_not_break_it(tmp_path: Path) -> None:
    j = await Journal(tmp_path / "rollouts.jsonl").open()
    tasks = [asyncio.create_task(j.append(rec(i))) for i in range(100)]
    await asyncio.sleep(0)  # all queued, none acknowledged yet
    tasks[0].cancel()  # the caller gives up; the writer must not trip over its future
    await j.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError) and results[1:] == list(range(1, 100))  # each its index
    records, problems = read_journal(j.path)
    assert problems == [] and {r["id"] for r in records} >= set(range(1, 100))


async def test_append_requires_open_and_rejects_unencodable_records(tmp_path: Path) -> None:
    j = Journal(tmp_path / "rollouts.jsonl")
    with pytest.raises(JournalError, match="not open"):
        await j.append(rec(0))
    await j.open()
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        await j.append({"bad": object()})
    with pytest.raises(TypeError, match="must be dicts"):
        await j.append([1, 2])  # type: ignore[arg-type]
    await j.append(rec(1))  # the journal is unaffected by a rejected record
    await j.close()
    await j.close()  # idempotent
    with pytest.raises(JournalError, match="not open"):
        await j.append(rec(2))
    assert [r["id"] for r in read_journal(j.path)[0]] == [1]


async def test_second_writer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    async with Journal(path):
        with pytest.raises(JournalError, match="already open for writing"):
            await Journal(path).open()
    async with Journal(path) as again:  # released on close
        await again.append(rec(0))


def test_torn_tail_is_reported_dropped_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    good = b"".join(json.dumps(rec(i)).encode() + b"\n" for i in range(3))
    path.write_bytes(good + b'{"id": 3, "payl')
    records, problems = read_journal(path)
    assert [r["id"] for r in records] == [0, 1, 2]
    assert len(problems) == 1 and ":4: torn last line" in problems[0] and "no trailing newline" in problems[0]
    dropped = repair(path)
    assert len(dropped) == 1 and "torn last line" in dropped[0]
    assert path.read_bytes() == good
    assert repair(path) == []  # already clean

    async def more() -> list[str]:
        async with Journal(path) as j:
            await j.append(rec(3))
            return j.repairs

    path.write_bytes(good + b'{"id": 3')
    assert len(asyncio.run(more())) == 1  # open() repairs before appending
    records, problems = read_journal(path)
    assert problems == [] and [r["id"] for r in records] == [0, 1, 2, 3]


def test_invalid_lines_middle_versus_end(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    lines = [json.dumps(rec(0)), "{oops", "", json.dumps(rec(1)), "[1, 2]", json.dumps(rec(2)),
             "\x00\x00garbage"]
    path.write_text("\n".join(lines) + "\n")
    records, problems = read_journal(path)
    assert [r["id"] for r in records] == [0, 1, 2]
    assert len(problems) == 3
    assert f"{path}:2: invalid JSON" in problems[0] and "skipped" in problems[0]
    assert f"{path}:5: not a JSON object" in problems[1]
    assert f"{path}:7: torn last line (invalid JSON" in problems[2]
    assert len(repair(path)) == 1  # only the trailing garbage goes; the middle is left for a human
    assert path.read_text().endswith(json.dumps(rec(2)) + "\n")
    assert read_journal(tmp_path / "missing.jsonl", missing_ok=True) == ([], [])
    with pytest.raises(FileNotFoundError):
        read_journal(tmp_path / "missing.jsonl")


CHILD = textwrap.dedent("""
    import asyncio, resource, signal, sys
    from palaestra.rollout.journal import Journal, JournalError

    async def main(path, limit):
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        async with Journal(path) as j:
            async def one(n):
                try:
                    await j.append({"id": n, "payload": "y" * 300})
                except JournalError as exc:
                    print("ERR", exc.errno, exc, flush=True)
                    return False
                print(n, flush=True)
                return True
            i = 0
            while True:
                results = await asyncio.gather(*(one(i + k) for k in range(8)))
                i += 8
                if not all(results):
                    return

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
""")


def test_sigkill_mid_stream_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), "0"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    acked: list[int] = []
    for line in proc.stdout:
        acked.append(int(line))
        if len(acked) >= 600:
            break
    proc.send_signal(signal.SIGKILL)
    rest = proc.stdout.read()  # acknowledgements already in the pipe when the kill landed
    proc.wait(timeout=10)
    acked += [int(x) for x in rest.split()]
    records, problems = read_journal(path)
    assert all("torn last line" in p for p in problems) and len(problems) <= 1
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids))
    assert set(acked) <= set(ids)
    assert all(r == {"id": r["id"], "payload": "y" * 300} for r in records)

    async def resume() -> None:
        async with Journal(path) as j:
            await j.append({"id": -1, "payload": ""})

    asyncio.run(resume())
    records, problems = read_journal(path)
    assert problems == [] and records[-1]["id"] == -1


def test_failed_write_rolls_back_and_names_path_and_errno(tmp_path: Path) -> None:
    # RLIMIT_FSIZE makes the kernel fail (and partially complete) writes past the limit, like a full disk.
    path = tmp_path / "rollouts.jsonl"
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), "20000"], capture_output=True, text=True,
                         timeout=60, check=False)
    errors = [line for line in out.stdout.splitlines() if line.startswith("ERR")]
    acked = [int(line) for line in out.stdout.splitlines() if not line.startswith("ERR")]
    assert len(errors) == 8, out.stderr  # every append of the failing batch is told, none is left hanging
    assert 40 < len(acked) < 60
    for line in errors:
        assert line.startswith(f"ERR {errno.EFBIG} ") and str(path) in line and "EFBIG" in line, line
    records, problems = read_journal(path)
    assert problems == []  # the partial batch was truncated away
    assert sorted(r["id"] for r in records) == sorted(acked)
    assert path.stat().st_size <= 20000 and path.read_bytes().endswith(b"\n")


@pytest.fixture
def tiny_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("tmpfs: mounting a 64k tmpfs to simulate ENOSPC needs root on Linux")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        pytest.skip(f"tmpfs: cannot mount a tmpfs here ({res.stderr.strip()}); ENOSPC is covered via RLIMIT_FSIZE")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


async def test_enospc_fails_the_batch_and_the_journal_recovers(tiny_tmpfs: Path) -> None:
    filler = tiny_tmpfs / "filler"
    filler.write_bytes(b"\0" * 32 * 1024)
    path = tiny_tmpfs / "rollouts.jsonl"
    acked = 0
    async with Journal(path) as j:
        with pytest.raises(JournalError) as info:
            for i in range(1000):
                await j.append(rec(i, size=900))
                acked += 1
        assert info.value.errno == errno.ENOSPC
        assert str(path) in str(info.value) and "ENOSPC" in str(info.value)
        results = await asyncio.gather(*(j.append(rec(5000 + i, size=900)) for i in range(40)),
                                       return_exceptions=True)
        assert all(isinstance(r, JournalError) and r.errno == errno.ENOSPC for r in results)
        records, problems = read_journal(path)
        assert problems == [] and len(records) == acked  # nothing half-written remains
        filler.unlink()
        await j.append(rec(9999))  # space freed: appends work again, on a clean line
    records, problems = read_journal(path)
    assert problems == [] and len(records) == acked + 1 and records[-1]["id"] == 9999


async def test_a_kept_journal_is_read_from_memory_only_while_the_file_holds_its_bytes(tmp_path: Path) -> None:
    """``Journal(keep=True)`` holds what it appended (``Written``); ``read_written`` takes those records as
    they are only when the file ends with exactly their bytes, parses the lines before them (an earlier
    session's, a bad one named as skipped, not torn) and otherwise reads the whole file as it is."""
    from palaestra.rollout.journal_read import read_written

    path = tmp_path / "rollouts.jsonl"
    # earlier sessions, with a damaged line between them
    path.write_bytes(orjson.dumps(rec(0)) + b"\n{not json\n" + orjson.dumps(rec(1)) + b"\n")
    rollout = Rollout(rollout_id="r1", task_id="t1", env="mcqa", agent="tool", model="m",
                      outcome=Outcome.scored(), verdict=Verdict(reward=1.0, answer="B"))
    async with Journal(path, keep=True) as j:
        indices = await asyncio.gather(*(j.append(rec(10 + i)) for i in range(5)), j.append(rollout))
        written = j.written
    assert sorted(indices) == list(range(6))
    assert written is not None and written.intact and len(written.records) == 6
    parsed_lines: list[int] = []
    parsed, parse_problems = read_journal(path, lines=parsed_lines)
    lines: list[int] = []
    records, problems, first = read_written(path, written, lines=lines)  # (line 2 is the damaged one)
    assert first == 2 and records == parsed and problems == parse_problems and lines == parsed_lines
    assert "line skipped" in problems[0] and "torn" not in problems[0]
    assert all(a is b for a, b in zip(records[2:], written.records, strict=True))  # not parsed: kept
    assert [records[2 + i] for i in indices[:5]] == [rec(10 + i) for i in range(5)]  # index = place in file
    assert Rollout.model_validate(records[2 + indices[5]]) == rollout

    data = path.read_bytes()
    at = data.rindex(b"x" * 50)
    path.write_bytes(data[:at] + b"y" + data[at + 1:])  # same size, one byte changed in this session's part
    records, _, first = read_written(path, written)
    assert first is None and records == read_journal(path)[0]
    assert any(str(r.get("payload", "")).startswith("y") for r in records)  # the file's bytes, not memory
    path.write_bytes(data + orjson.dumps(rec(99)) + b"\n")  # a line appended after the journal closed: parsed
    lines.clear()
    records, _, first = read_written(path, written, lines=lines)
    assert first == 2 and records[-1] == rec(99) and len(records) == 9 and records[2] is written.records[0]
    assert lines == [1, 3, 4, 5, 6, 7, 8, 9, 10]
    path.write_bytes(data[:-5])  # shorter than what the journal wrote: nothing kept is used
    assert read_written(path, written)[2] is None
    path.write_bytes(data)

    async with Journal(path, keep=True) as j:  # lines it did not encode itself: nothing kept is used
        await j.append_lines([orjson.dumps(rec(100)) + b"\n"])
        assert j.written is not None and not j.written.intact
        assert read_written(path, j.written)[2] is None


async def test_a_kept_journal_holds_no_more_than_its_budget_and_the_rest_is_parsed(tmp_path: Path) -> None:
    """Past ``keep_bytes`` a Journal keeps no more records (a long run holds a bounded amount while it
    collects); the end of the run takes the kept ones from memory and parses the lines after them."""
    from palaestra.rollout.journal_read import read_written

    path = tmp_path / "rollouts.jsonl"
    async with Journal(path, keep=True, keep_bytes=1000) as j:
        for i in range(30):  # one at a time: each its own batch
            await j.append(rec(i))
        written = j.written
    assert written is not None and written.full and written.intact
    assert 0 < len(written.records) < 30 and written.size <= 1000
    lines: list[int] = []
    records, problems, first = read_written(path, written, lines=lines)
    assert first == 0 and problems == [] and records == [rec(i) for i in range(30)] and lines == list(range(1, 31))
    assert all(a is b for a, b in zip(records, written.records, strict=False))
    assert records[len(written.records)] is not written.records[-1]  # the rest: parsed
