"""Schema-driven fuzzing of the environment server: schemathesis generates requests from the server's
own ``GET /openapi.json`` (positive and negative data) and checks every answer against it, in process
(ASGI), for ``mcqa`` (no tools) and ``workplace`` (stateful tools).

Promise under test: no request gets a 5xx except a documented verifier/judge/sandbox failure; every
answer has the status codes, content type and body schema the document declares; schema-violating
requests are rejected with 4xx; and the document describes exactly the routes the server has.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from fuzz_strategies import ci, long
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, positive_data_acceptance
from schemathesis.core.result import Ok
from starlette.routing import Route

from palaestra.envs.registry import load_env
from palaestra.server.env_app import create_env_app
from palaestra.server.openapi import openapi_document
from palaestra.server.sessions import EnvironmentHost

ENVS = ["mcqa", "workplace"]
MODES: tuple[GenerationMode, ...] = tuple(GenerationMode)  # positive and negative data
# A 5xx is allowed only for these kinds: a broken verifier, judge or sandbox is an infrastructure failure
# the client must see as such (failed(kind), never a score). Anything else (kind "environment" is the
# last-resort handler for an unexpected exception) is a bug.
DOCUMENTED_5XX = {"verifier", "judge", "sandbox"}


@schemathesis.check
def documented_failures_only(ctx: Any, response: Any, case: Any) -> bool | None:
    """Replaces schemathesis' not_a_server_error: a 5xx must be a JSON error of a documented kind."""
    if response.status_code < 500:
        return None
    try:
        kind = response.json()["error"]["kind"]
    except Exception:  # any non-JSON 5xx is itself the failure
        raise AssertionError(f"{response.status_code} without a JSON error body: {response.text[:300]}") from None
    if kind not in DOCUMENTED_5XX:
        raise AssertionError(f"undocumented {response.status_code} ({kind}): {response.text[:500]}")
    return None


# positive_data_acceptance is left out on purpose: the document can say what a Task looks like, not what
# each environment needs in it (mcqa needs metadata.expected_answer), so a schema-valid task may get the
# documented 422 invalid_task.
EXCLUDED = [not_a_server_error, positive_data_acceptance]


def _host(env: str) -> EnvironmentHost:
    return EnvironmentHost(load_env(env), max_sessions=256)


def _validate(case: Any) -> None:
    case.call_and_validate(excluded_checks=EXCLUDED, additional_checks=[documented_failures_only])


def _run(cfg: settings, strategy: st.SearchStrategy[Any], check: Callable[[Any], None]) -> None:
    @cfg
    @given(strategy)
    def prop(case: Any) -> None:
        check(case)

    try:
        prop()
    except Unsatisfiable:
        return  # e.g. negative data for an operation without parameters or body: nothing to send


@pytest.fixture(autouse=True)
def _stop_asgi_lifespans() -> Iterator[None]:
    """schemathesis starts each app's lifespan (our session reaper) in a helper thread and keeps it until
    exit; stop them after each test so every host closes its sessions now."""
    yield
    from schemathesis.python import asgi

    stop = getattr(asgi, "shutdown_lifespans", None)
    if stop is not None:
        stop()


def _schema_property(cfg: settings, env: str) -> None:
    host = _host(env)
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_env_app(host))
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"the document has an invalid operation: {result}"
        for mode in MODES:
            _run(cfg, result.ok().as_strategy(generation_mode=mode), _validate)
    assert len(host.sessions) <= host.max_sessions


def _session_property(cfg: settings, env: str) -> None:
    """The session routes with a live session id (random ids only ever reach the 404 branch)."""
    host = _host(env)
    app = create_env_app(host)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    task = load_env(env).examples()[0]
    import asyncio

    opened = asyncio.run(host.open(task))
    sid = opened["session_id"]
    names = [t["function"]["name"] for t in opened["tools"]] or ["no_such_tool"]
    tool_op = schema["/sessions/{sid}/tools/{name}"]["POST"]
    verify_op = schema["/sessions/{sid}/verify"]["POST"]
    for mode in MODES:
        def tool_cases(name: str, mode: GenerationMode = mode) -> st.SearchStrategy[Any]:
            return tool_op.as_strategy(generation_mode=mode, path_parameters={"sid": sid, "name": name})

        _run(cfg, st.sampled_from(names).flatmap(tool_cases), _validate)
        _run(cfg, verify_op.as_strategy(generation_mode=mode, path_parameters={"sid": sid}), _validate)
    assert sid in host.sessions, "fuzzing a session's tools and verify must not lose the session"


@pytest.mark.parametrize("env", ENVS)
def test_schemathesis_env_server(env: str) -> None:
    _schema_property(ci(15), env)


@pytest.mark.parametrize("env", ENVS)
def test_schemathesis_live_session(env: str) -> None:
    _session_property(ci(30), env)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("env", ENVS)
def test_schemathesis_env_server_long(env: str) -> None:
    _schema_property(long(1000), env)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("env", ENVS)
def test_schemathesis_live_session_long(env: str) -> None:
    _session_property(long(2000), env)


# "." and "..": URL dot segments that clients normalise away; the HTTP transport answers them unknown_tool itself.
HOSTILE_NAMES = ["list_tickets\n", "\nlist_tickets", "list\ntickets", "list_tickets\r\n", "list_tickets\x00",
                 "\t", "\x1b[31m", "\u2028", "a/b", " ", "list_tickets/"]


async def test_any_tool_name_reaches_the_tool_route() -> None:
    """Every name, control characters included, gets the structured unknown_tool 404 naming the available
    tools (Starlette's ``path`` convertor stopped at a newline: a bare 404, or 'x\\n' ran the tool 'x')."""
    from urllib.parse import quote

    import httpx

    host = _host("workplace")
    sid = (await host.open(load_env("workplace").examples()[0]))["session_id"]
    app = create_env_app(host)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        real = await client.post(f"/sessions/{sid}/tools/list_tickets", content=b"{}")
        hostile = {name: await client.post(f"/sessions/{sid}/tools/{quote(name, safe='')}", content=b"{}")
                   for name in HOSTILE_NAMES}
    await host.close_all()
    assert real.status_code == 200 and real.json().get("error") is None, real.text
    for name, resp in hostile.items():
        assert resp.status_code == 404, (name, resp.text)
        error = resp.json()["error"]
        assert error["kind"] == "unknown_tool" and name in error["message"], (name, error)
        assert "list_tickets" in error["hint"], (name, error)


def test_document_describes_exactly_the_served_routes() -> None:
    app = create_env_app(_host("mcqa"))
    served = {(re.sub(r":\w+}", "}", r.path), m)  # Starlette's convertors; OpenAPI has no such syntax
              for r in app.routes if isinstance(r, Route) for m in (r.methods or ()) if m != "HEAD"}
    served.discard(("/openapi.json", "GET"))
    doc = openapi_document("mcqa", "0.1")
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}
    assert documented == served


def _types(node: Any) -> list[Any]:
    """Every JSON-Schema ``type`` value in the document."""
    if isinstance(node, dict):
        found = [node["type"]] if "type" in node and not isinstance(node["type"], dict) else []
        return found + [t for v in node.values() for t in _types(v)]
    if isinstance(node, list):
        return [t for v in node for t in _types(v)]
    return []


def test_document_is_valid_for_its_openapi_version() -> None:
    doc = openapi_document("mcqa", "0.1")
    if doc["openapi"].startswith("3.0"):
        assert all(isinstance(t, str) and t != "null" for t in _types(doc)), sorted(map(str, _types(doc)))
    else:
        assert doc["openapi"].startswith("3.1")


async def test_schema_violating_message_role_is_rejected() -> None:
    import httpx

    app = create_env_app(_host("workplace"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        resp = await client.post("/reference", json={"task": {"id": "x", "input": [{"role": 5}]}})
    assert 400 <= resp.status_code < 500, resp.text


@pytest.mark.parametrize("body", [b"[]", b"0", b"false", b'""', b'{"trajectory": []}', b'{"trajectory": 0}',
                                  b'{"trajectory": null}'])
async def test_verify_rejects_falsy_non_object_bodies(body: bytes) -> None:
    import httpx

    host = _host("mcqa")
    task = load_env("mcqa").examples()[0]
    sid = (await host.open(task))["session_id"]
    app = create_env_app(host)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        resp = await client.post(f"/sessions/{sid}/verify", content=body)
    await host.close_all()
    assert resp.status_code in (400, 422), resp.text


async def test_tool_route_document_allows_what_the_server_accepts() -> None:
    import httpx

    host = _host("workplace")
    sid = (await host.open(load_env("workplace").examples()[0]))["session_id"]
    app = create_env_app(host)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        null = await client.post(f"/sessions/{sid}/tools/list_tickets", content=b"null")
        empty = await client.post(f"/sessions/{sid}/tools/list_tickets", content=b"")
    await host.close_all()
    body = openapi_document("workplace", "0.1")["paths"]["/sessions/{sid}/tools/{name}"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    types = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    if null.status_code == 200:
        assert "null" in types or schema.get("nullable") is True, schema
    if empty.status_code == 200:
        assert not body.get("required"), body


async def test_verify_rejects_a_null_body() -> None:
    """Found by the long variant (schemathesis ST201): read_json gives None for an empty body and for the
    JSON literal null alike, and verify took a null body for an empty trajectory. Like the tool route, a
    JSON null is not a body (422); no body at all still verifies an empty trajectory."""
    import httpx

    host = _host("mcqa")
    sid = (await host.open(load_env("mcqa").examples()[0]))["session_id"]
    app = create_env_app(host)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        resp = await client.post(f"/sessions/{sid}/verify", content=b"null")
        empty = await client.post(f"/sessions/{sid}/verify", content=b"")
    await host.close_all()
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["kind"] == "bad_request" and "got null" in error["message"] and "no body" in error["hint"]
    assert empty.status_code == 200, empty.text
