"""The cheapest possible rollout, for ``bench/overhead.py floor`` (run by it as a child process).

  python bench/floor_client.py BASE_URL PROMPTS.jsonl N CONCURRENCY OUT.jsonl

Each of N rollouts does only what any rollout must: encode a chat request with orjson, one aiohttp POST
to ``BASE_URL/chat/completions`` (aiohttp: the client library of Palaestra's OpenAI-compatible backend,
on one pooled session), one orjson decode of the answer and encode of a record, and one append to
OUT.jsonl that returns only once the record is fsynced. Appends are group-committed as the journal does
it: one writer task writes everything queued with one ``write`` and one ``fsync`` in a worker thread.
No validation, no retries, no grading, no bookkeeping: nothing a real runtime could skip less.
Imports neither Palaestra nor pydantic. Prints one JSON line: rollouts done and answers received."""

from __future__ import annotations

import asyncio
import os
import sys
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


async def main(base_url: str, rows: list[dict[str, Any]], n: int, concurrency: int, out: str) -> dict[str, int]:
    journal = GroupCommit(out)
    url = base_url.rstrip("/") + "/chat/completions"
    next_index = iter(range(n))
    answered = 0

    async def lane(session: aiohttp.ClientSession) -> None:
        nonlocal answered
        for i in next_index:
            row = rows[i % len(rows)]
            body = orjson.dumps({"model": "scripted", "messages": row["messages"]})
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                raw = await resp.read()
            reply = orjson.loads(raw)
            content = reply["choices"][0]["message"].get("content")
            answered += content is not None
            await journal.append(orjson.dumps({"task_id": row["id"], "i": i, "response": reply},
                                              option=orjson.OPT_APPEND_NEWLINE))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(lane(session) for _ in range(min(concurrency, n))))
    await journal.close()
    return {"rollouts": n, "answered": answered}


if __name__ == "__main__":
    url, prompts, count, conc, out_path = sys.argv[1:6]
    result = asyncio.run(main(url, read_rows(prompts), int(count), int(conc), out_path))
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
