"""A run's model servers asked once before the first rollout (``models.reach``, ``rollout.models``): real
sockets on 127.0.0.1, a listening one and a port nothing listens on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from palaestra.core.errors import ModelError
from palaestra.models.reach import unreachable
from palaestra.rollout.config import RunConfig
from palaestra.rollout.models import http_urls, refuse_unreachable
from palaestra.server.ports import free_port


@pytest.fixture
async def listening() -> AsyncIterator[str]:
    """A base URL something listens at (it accepts and closes: a connection is all that is asked)."""

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await server.wait_closed()


def _dead() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


async def test_a_listening_server_is_reachable_and_a_closed_port_is_not(listening: str) -> None:
    dead = _dead()
    assert await unreachable([listening, dead, dead + "/again"]) == {dead: "Connection refused",
                                                                   dead + "/again": "Connection refused"}


async def test_behind_a_proxy_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _dead()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("NO_PROXY", "")
    assert await unreachable([dead]) == {}  # the first hop is the proxy: the server cannot be asked from here


def test_only_http_models_have_servers_to_ask() -> None:
    assert http_urls("http://127.0.0.1:1/v1,http://127.0.0.1:2/v1") == ["http://127.0.0.1:1/v1",
                                                                        "http://127.0.0.1:2/v1"]
    assert http_urls("responses:http://127.0.0.1:3/v1") == ["http://127.0.0.1:3/v1"]
    assert http_urls("scripted:oracle") == [] and http_urls("local") == []


async def test_a_dead_model_refuses_the_run_naming_it_without_its_credentials() -> None:
    port = free_port()
    spec = f"http://user:sk-canary-2@127.0.0.1:{port}/v1?api_key=sk-canary-3"
    with pytest.raises(ModelError) as refused:
        await refuse_unreachable(RunConfig(env="mcqa", model=spec), [spec])
    message = refused.value.message
    assert f"127.0.0.1:{port}/v1" in message and "Connection refused" in message and "nothing was started" in message
    assert "sk-canary" not in message and "start the model server" in (refused.value.hint or "")


async def test_an_endpoint_pool_is_down_only_when_every_endpoint_is(listening: str) -> None:
    dead, other = _dead(), _dead()
    cfg = RunConfig(env="mcqa", model=f"{dead},{listening}")
    await refuse_unreachable(cfg, [cfg.model])  # one endpoint answers: the pool fails over to it
    with pytest.raises(ModelError, match="cannot reach") as refused:
        await refuse_unreachable(cfg, [f"{dead},{other}"])
    assert dead in refused.value.message and other in refused.value.message


async def test_a_router_asks_every_model_it_routes_to(listening: str) -> None:
    dead = _dead()
    cfg = RunConfig(env="mcqa", models={"a": listening, "b": dead, "c": "scripted:oracle"})
    await refuse_unreachable(cfg, ["router:split?to=a,c"])
    with pytest.raises(ModelError, match=dead.replace(".", r"\.")):
        await refuse_unreachable(cfg, ["router:split?to=a,b,c"])
    await refuse_unreachable(cfg, ["scripted:oracle", "c"])  # nothing to ask of a model that runs here
