"""OpenAIBackend against a real upstream on 127.0.0.1 that fails in scripted ways."""

from __future__ import annotations

import asyncio
import email.utils
import gc
import time
import warnings
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from palaestra.core.errors import ConfigError, ModelError
from palaestra.models.base import CallContext
from palaestra.models.openai_http import OpenAIBackend, api_key_from_env, env_proxy, retry_after_seconds
from palaestra.server.ports import free_port

KEY = "sk-test-secret-123"


def completion(model: str, text: str = "hello") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


class Upstream:
    """A fake OpenAI-compatible server: the first path segment picks its misbehaviour."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.times: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.app = Starlette(routes=[
            Route("/{scenario}/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/{scenario}/v1/responses", self.responses, methods=["POST"]),
        ])

    async def chat(self, request: Request) -> Response:
        scenario = request.path_params["scenario"]
        self.hits[scenario] += 1
        self.times.append(time.monotonic())
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        n = self.hits[scenario]
        ok = Response(orjson.dumps(completion(body.get("model", "?"))), media_type="application/json")
        if scenario == "flaky":
            return ok if n > 2 else Response(b'{"error": {"message": "engine overloaded"}}', status_code=500)
        if scenario == "ratelimit":
            return ok if n > 1 else Response(b"slow down", status_code=429, headers={"retry-after": "1"})
        if scenario == "garbage":
            return Response(b"<html>definitely not json</html>", media_type="text/html")
        if scenario == "hang":  # far longer than any bound below: a missed timeout cannot pass
            await asyncio.sleep(10)
        if scenario == "stall":  # headers at once, then the body never finishes
            async def trickle() -> AsyncIterator[bytes]:
                yield b'{"id": '
                await asyncio.sleep(10)
            return StreamingResponse(trickle(), media_type="application/json")
        if scenario == "moved":
            return Response(b"", status_code=307, headers={"location": "http://127.0.0.1:1/other/v1"})
        if scenario == "bad":
            return Response(b'{"error": {"message": "max_tokens is too large"}}', status_code=400)
        if scenario == "unauth":
            return Response(b'{"error": {"message": "invalid key"}}', status_code=401)
        if scenario == "error200":
            return Response(b'{"error": {"message": "provider overloaded", "code": 503}}')
        if scenario == "slow":
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await asyncio.sleep(0.1)
            self.in_flight -= 1
        return ok

    async def responses(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.bodies.append(body)
        out = {"id": "resp_1", "object": "response", "status": "completed", "model": body.get("model"),
               "output": [], "error": None}
        return Response(orjson.dumps(out), media_type="application/json")


@pytest.fixture
def upstream(live_server: Any) -> tuple[Upstream, str]:
    up = Upstream()
    return up, live_server(up.app)


def backend(url: str, scenario: str, **kw: Any) -> OpenAIBackend:
    kw.setdefault("backoff_base", 0.01)
    return OpenAIBackend(f"{url}/{scenario}/v1", **kw)


async def test_ok_fills_model_merges_extra_body_and_sends_key(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "ok", model="served-model", api_key=KEY, extra_body={"top_k": 20})
    try:
        out = await b.chat({"model": "client-name", "messages": [{"role": "user", "content": "hi"}],
                            "stream": True, "stream_options": {"include_usage": True}}, CallContext())
    finally:
        await b.aclose()
    assert out["choices"][0]["message"]["content"] == "hello"
    sent = up.bodies[-1]
    assert sent["model"] == "served-model" and sent["top_k"] == 20
    assert "stream" not in sent and "stream_options" not in sent
    assert up.headers[-1]["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(b)


async def test_500_twice_then_ok_is_retried(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "flaky", max_retries=3)
    out = await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert out["object"] == "chat.completion"
    assert up.hits["flaky"] == 3


async def test_500_exhausts_retries(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "flaky", max_retries=1)
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert info.value.status == 500 and up.hits["flaky"] == 2
    assert "engine overloaded" in info.value.message and "2 attempts" in info.value.message


async def test_429_honours_retry_after(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "ratelimit", max_retries=2)
    await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert up.hits["ratelimit"] == 2
    gap = up.times[1] - up.times[0]
    assert 0.9 <= gap < 3.0


async def test_garbage_body_is_a_clear_model_error(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "garbage")
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    msg = info.value.message
    assert "HTTP 200" in msg and "definitely not json" in msg and f"{url}/garbage/v1/chat/completions" in msg
    assert up.hits["garbage"] == 1


async def test_hang_times_out(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "hang", timeout=0.3, max_retries=1)
    t0 = time.monotonic()
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert "timed out" in info.value.message
    assert time.monotonic() - t0 < 5  # two 0.3 s attempts, not the 10 s hang (a generous bound under load)
    assert up.hits["hang"] == 2


async def test_400_is_not_retried_and_401_hides_key(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "bad", max_retries=3)
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    assert info.value.status == 400 and "max_tokens is too large" in info.value.message
    assert up.hits["bad"] == 1
    await b.aclose()
    b = backend(url, "unauth", api_key=KEY)
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert info.value.status == 401 and KEY not in str(info.value) and "API key" in str(info.value)


async def test_error_inside_200_body(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    b = backend(url, "error200")
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert info.value.status == 503 and "provider overloaded" in info.value.message


async def test_concurrency_limit(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "slow", max_concurrency=2)
    await asyncio.gather(*(b.chat({"messages": []}, CallContext()) for _ in range(6)))
    await b.aclose()
    assert up.hits["slow"] == 6 and up.max_in_flight == 2


async def test_responses_endpoint(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "ok", model="m")
    out = await b.responses({"input": "hi"})
    await b.aclose()
    assert out["object"] == "response" and up.bodies[-1] == {"input": "hi", "model": "m"}


async def test_connection_refused_is_retried_then_fails() -> None:
    port = free_port()  # nothing listens there
    b = OpenAIBackend(f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_base=0.01)
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert "cannot reach the model" in info.value.message and "3 attempts" in info.value.message


def test_retry_after_parsing() -> None:
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("1000") == 60.0
    assert retry_after_seconds("garbage") is None and retry_after_seconds(None) is None
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    parsed = retry_after_seconds(future)
    assert parsed is not None and 28 <= parsed <= 30
    assert retry_after_seconds(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0.0


def test_api_key_from_env_and_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", " abc \n")
    assert api_key_from_env("MY_KEY") == "abc"
    monkeypatch.delenv("MY_KEY")
    assert api_key_from_env("MY_KEY") is None
    path = tmp_path / "key"
    path.write_text("from-file\n")
    assert api_key_from_env("MY_KEY", file=path) == "from-file"
    with pytest.raises(ConfigError, match="cannot read the API key file"):
        api_key_from_env(file=tmp_path / "missing")


def test_bad_base_url() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        OpenAIBackend("localhost:8000/v1")


async def test_stalled_body_times_out(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    b = backend(url, "stall", timeout=0.3, max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="timed out after 0.3s"):
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert time.monotonic() - t0 < 5  # 0.3 s, not the 10 s stall


async def test_redirect_is_not_followed(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "moved", max_retries=3)
    with pytest.raises(ModelError) as info:
        await b.chat({"messages": []}, CallContext())
    await b.aclose()
    assert info.value.status == 307 and up.hits["moved"] == 1
    assert info.value.hint is not None and "http://127.0.0.1:1/other/v1" in info.value.hint


async def raw_server(handler: Any) -> tuple[asyncio.AbstractServer, str]:
    """A bare TCP server, for failures that no HTTP framework will produce on purpose."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


async def test_disconnect_is_retried_at_once_then_succeeds() -> None:
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(1)
        await reader.readuntil(b"\r\n\r\n")
        if len(seen) > 1:
            body = orjson.dumps(completion("m"))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    server, url = await raw_server(handle)
    b = OpenAIBackend(url, max_retries=1, backoff_base=10.0)  # a backoff sleep would blow the time limit
    t0 = time.monotonic()
    try:
        out = await b.chat({"messages": []}, CallContext())
    finally:
        await b.aclose()
        server.close()
        await server.wait_closed()
    assert out["object"] == "chat.completion" and len(seen) == 2
    assert time.monotonic() - t0 < 8.0  # no backoff sleep: that alone would be 10 s


async def test_disconnect_every_time_names_the_url() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server, url = await raw_server(handle)
    b = OpenAIBackend(url, max_retries=2, backoff_base=0.01)
    try:
        with pytest.raises(ModelError) as info:
            await b.chat({"messages": []}, CallContext())
    finally:
        await b.aclose()
        server.close()
        await server.wait_closed()
    msg = info.value.message
    assert f"{url}/chat/completions" in msg and "closed the connection" in msg and "3 attempts" in msg
    assert info.value.hint is not None and "logs" in info.value.hint


async def test_caller_session_is_used_and_left_open(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    async with aiohttp.ClientSession(headers={"x-caller": "yes"}) as session:
        b = backend(url, "ok", session=session)
        await b.chat({"messages": []}, CallContext())
        await b.aclose()
        assert not session.closed
        await b.chat({"messages": []}, CallContext())
    assert [h.get("x-caller") for h in up.headers] == ["yes", "yes"]


async def test_aclose_leaves_no_unclosed_warnings(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream

    async def unclosed_after(close: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            b = backend(url, "ok")
            await b.chat({"messages": []}, CallContext())
            assert b._session is not None
            connector = b._session.connector
            if close:
                await b.aclose()
            del b
            gc.collect()
        if connector is not None:
            await connector.close()  # the control's leak stops here: no warning outside this test
        return [str(w.message) for w in caught if "Unclosed" in str(w.message)]

    assert await unclosed_after(close=True) == []
    # Control: the check does see a leak, so the clean result above means something.
    assert any("Unclosed client session" in m for m in await unclosed_after(close=False))


def test_built_outside_a_loop_and_bound_to_the_first_loop(upstream: tuple[Upstream, str]) -> None:
    up, url = upstream
    b = backend(url, "ok")  # no running loop here: the session must not be made yet
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(b.chat({"messages": []}, CallContext()))
        with pytest.raises(ConfigError, match="another event loop"):
            asyncio.run(b.chat({"messages": []}, CallContext()))
        first.run_until_complete(b.aclose())
    finally:
        first.close()

    async def again() -> None:  # after aclose a new loop may use it
        await b.chat({"messages": []}, CallContext())
        await b.aclose()

    asyncio.run(again())
    assert up.hits["ok"] == 2


def test_env_proxy_is_honoured_except_for_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.upper(), raising=False)
    assert env_proxy("http://10.0.0.5:8000/v1") is None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    assert env_proxy("http://10.0.0.5:8000/v1") == "http://127.0.0.1:3128"
    assert env_proxy("https://10.0.0.5/v1") is None
    monkeypatch.setenv("NO_PROXY", "10.0.0.5")
    assert env_proxy("http://10.0.0.5:8000/v1") is None
