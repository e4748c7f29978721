"""The cheapest possible rollout, for ``bench/overhead.py floor`` (run by it as a child process).

  python bench/floor_client.py BASE_URL PROMPTS.jsonl N CONCURRENCY OUT.jsonl

Each of N rollouts does only what any rollout must: encode a chat request with orjson, one aiohttp POST
to ``BASE_URL/chat/completions`` (aiohttp: the client library of Palaestra's OpenAI-compatible backend,
on one pooled session), one orjson decode of the answer and encode of a record, and one append to
OUT.jsonl that returns only once the record is fsynced. A row with ``tests`` is a code task: the last
fenced block of the answer, followed by the tests, runs as ``python -I -S -c PROGRAM`` in a plain child
process (no sandbox: the cheapest way to run a program at all) and its exit status is the record's
``passed``. Appends are group-committed as the journal does
it: one writer task writes everything queued with one ``write`` and one ``fsync`` in a worker thread.
No validation, no retries, no grading, no bookkeeping: nothing a real runtime could skip less.
Imports neither Palaestra nor pydantic. Prints one JSON line: rollouts done and answers received."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson


class GroupCommit:
    """Append lines; each ``append`` returns once its line is fsynced (one write + fsync per batch)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self.wake = asyncio.Event()
        self.closing = False
        self.writer = asyncio.ensure_future(self._run())

    async def append(self, line: bytes) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((line, fut))
        self.wake.set()
        await fut

    def _write(self, data: bytes) -> None:
        os.write(self.fd, data)
        os.fsync(self.fd)

    async def _run(self) -> None:
        while True:
            if not self.pending:
                if self.closing:
                    return
                self.wake.clear()
                await self.wake.wait()
                continue
            batch, self.pending = self.pending, []
            await asyncio.to_thread(self._write, b"".join(line for line, _ in batch))
            for _, fut in batch:
                fut.set_result(None)

    async def close(self) -> None:
        self.closing = True
        self.wake.set()
        await self.writer
        os.close(self.fd)


def read_rows(path: str) -> list[dict[str, Any]]:
    with open(path, "rb") as fh:
        return [orjson.loads(line) for line in fh]


def last_block(text: str) -> str:
    """The body of the last fenced block of ``text`` (the whole text when it has none)."""
    end = text.rfind("```")
    start = text.rfind("```", 0, end)
    if start < 0:
        return text
    body = text[start + 3 : end]
    return body.split("\n", 1)[1] if "\n" in body else body


async def run_program(program: str) -> bool:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-I", "-S", "-c", program,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    return await proc.wait() == 0


async def main(base_url: str, rows: list[dict[str, Any]], n: int, concurrency: int, out: str) -> dict[str, int]:
    journal = GroupCommit(out)
    url = base_url.rstrip("/") + "/chat/completions"
    next_index: Iterator[int] = iter(range(n))
    answered = passed = 0

    async def lane(session: aiohttp.ClientSession) -> None:
        nonlocal answered, passed
        for i in next_index:
            row = rows[i % len(rows)]
            body = orjson.dumps({"model": "scripted", "messages": row["messages"]})
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                raw = await resp.read()
            reply = orjson.loads(raw)
            content = reply["choices"][0]["message"].get("content")
            answered += content is not None
            record: dict[str, Any] = {"task_id": row["id"], "i": i, "response": reply}
            if "tests" in row:
                record["passed"] = ok = await run_program(last_block(content or "") + "\n" + "\n".join(row["tests"]))
                passed += ok
            await journal.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(lane(session) for _ in range(min(concurrency, n))))
    await journal.close()
    return {"rollouts": n, "answered": answered, "passed": passed}


if __name__ == "__main__":
    url, prompts, count, conc, out_path = sys.argv[1:6]
    result = asyncio.run(main(url, read_rows(prompts), int(count), int(conc), out_path))
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
