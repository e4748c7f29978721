"""Every Palaestra server is reachable only by its user's programs: a foreign Host (DNS rebinding), a
foreign Origin (a web page), a missing token and a job naming a foreign policy URL are each refused, while
the runtime's own clients keep working with no user action. Real servers on 127.0.0.1 throughout: the CLI
commands as processes, the supervised environment process, the agent app under uvicorn."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from palaestra.client.env_client import EnvClient
from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.models.openai_http import OpenAIBackend
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.agent_server import create_agent_app
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.server.security import GuardPolicy, host_allowed, url_host_allowed

CLI = [sys.executable, "-m", "palaestra.cli.main"]
EVIL = "evil.example.com"
FOREIGN_ORIGIN = "http://evil.example.com"


class Cli:
    """A ``palaestra`` command as a process, its output read line by line so a test can wait on a line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=(pipe,), daemon=True)
                         for pipe in (self.proc.stdout, self.proc.stderr)]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 90.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        exited_at: float | None = None
        with self._cond:
            while True:
                for line in self.lines:
                    if m := rx.search(line):
                        return m
                now = time.monotonic()
                if exited_at is None and self.proc.poll() is not None:
                    exited_at = now  # give the readers a moment to drain what it wrote last
                if exited_at is not None and now > exited_at + 2:
                    raise AssertionError(f"exited {self.proc.returncode} before {pattern!r}:\n{self.output}")
                if now > deadline:
                    raise AssertionError(f"no {pattern!r} within {timeout:g} s:\n{self.output}")
                self._cond.wait(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for reader in self._readers:  # all it wrote is in ``lines`` once the pipes are drained
            reader.join(10)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """The user's environment minus any token, with the runtime dir under the test's tmp directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("PALAESTRA_TOKEN", "PALAESTRA_VIEW_TOKEN")}
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    return env


def _token_file(path: Path) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o600, oct(mode)
    return path.read_text().strip()


def _refusals(base: str, token: str | None, post_path: str, body: bytes = b"{}") -> None:
    """The four refusals every guarded server gives, checked on a real socket."""
    auth = {"authorization": f"Bearer {token}"} if token else {}
    port = int(base.rsplit(":", 1)[1].split("/")[0])
    with httpx.Client(base_url=base, timeout=30) as c:
        for host in (EVIL, f"{EVIL}:{port}", f"127.0.0.1:{port + 1}", f"localhost.{EVIL}:{port}"):
            r = c.post(post_path, content=body, headers={**auth, "host": host})
            assert r.status_code == 400 and r.json()["error"]["kind"] == "bad_host", (host, r.text)
        assert _raw_status(port, post_path, auth, [f"127.0.0.1:{port}", f"{EVIL}:{port}"]) == 400  # which one counts?
        r = c.post(post_path, content=body, headers={**auth, "origin": FOREIGN_ORIGIN})
        assert r.status_code == 403 and r.json()["error"]["kind"] == "cross_origin", r.text
        pre = c.options(post_path, headers={"origin": FOREIGN_ORIGIN, "access-control-request-method": "POST"})
        assert pre.status_code == 403 and not any(h.startswith("access-control-") for h in pre.headers), pre.headers
        if token:
            for headers in ({}, {"authorization": "Bearer wrong-token-of-some-length"}):
                r = c.post(post_path, content=body, headers=headers)
                assert r.status_code == 401 and r.json()["error"]["kind"] == "unauthorized", r.text


def _raw_status(port: int, path: str, headers: dict[str, str], hosts: list[str]) -> int:
    """The status of a request sent with several Host headers (HTTP clients refuse to send one)."""
    lines = [f"POST {path} HTTP/1.1", *(f"Host: {h}" for h in hosts), *(f"{k}: {v}" for k, v in headers.items()),
             "Content-Length: 0", "Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall("\r\n".join(lines).encode())
        head = sock.recv(64).decode("latin-1")
    return int(head.split()[1])


# ---- the rules themselves ------------------------------------------------------------------------
def test_host_rules() -> None:
    loop = GuardPolicy()
    assert host_allowed("127.0.0.1:8000", 8000, loop) and host_allowed("LOCALHOST:8000", 8000, loop)
    assert host_allowed("[::1]:8000", 8000, loop) and host_allowed("127.0.0.1", 80, loop)
    for bad in ("evil.example.com:8000", "127.0.0.1:8001", "127.0.0.1", "localhost.evil.com:8000", "::1:8000",
                "127.0.0.1:8000:1", "", "127.0.0.2:8000", "[::1]x:8000"):
        assert not host_allowed(bad, 8000, loop), bad
    named = GuardPolicy.for_bind("0.0.0.0", token="t" * 20, allowed_hosts=["gpu1.lab", "proxy.lab:443"])
    assert host_allowed("gpu1.lab:8000", 8000, named) and host_allowed("proxy.lab:443", 8000, named)
    assert not host_allowed("proxy.lab:444", 8000, named) and not host_allowed(EVIL, 8000, named)
    assert host_allowed("10.0.0.5:8000", 8000, GuardPolicy.for_bind("10.0.0.5", token="t" * 20))


def test_policy_url_rules() -> None:
    for ok in ("http://127.0.0.1:8000/v1", "http://localhost/v1", "https://[::1]:9/v1"):
        assert url_host_allowed(ok), ok
    for bad in ("http://evil.example.com/v1", "http://127.0.0.1@evil.example.com/v1", "http://127.1:8000/v1",
                "http://2130706433/v1", "file:///etc/passwd", "http://0.0.0.0:8000/v1", "gopher://127.0.0.1/",
                "http://[::1/v1", "not a url"):
        assert not url_host_allowed(bad), bad
    assert url_host_allowed("http://gpu1.lab:8000/v1", ["gpu1.lab"])
    assert url_host_allowed("http://gpu1.lab:8000/v1", ["gpu1.lab:8000"])
    assert not url_host_allowed("http://gpu1.lab:8001/v1", ["gpu1.lab:8000"])


# ---- environment servers ---------------------------------------------------------------------------
async def test_env_serve_generates_a_token_and_refuses_strangers(cli_env: dict[str, str], tmp_path: Path) -> None:
    server = Cli(["env", "serve", "mcqa", "--port", "0"], cli_env)
    try:
        port = int(server.wait_for(r"PALAESTRA_READY (\d+)").group(1))
        server.wait_for(r"saved in")  # stderr, read by another thread than the ready line
        # the default token file: under the user's runtime dir, named by kind and port, 0600
        token = _token_file(tmp_path / "runtime" / "palaestra" / f"env-{port}.token")
        assert len(token) >= 32 and server.output.count(token) == 1  # printed once
        base = f"http://127.0.0.1:{port}"
        _refusals(base, token, "/sessions", orjson.dumps({"task": {"id": "q", "input": "Q?"}}))
        server.wait_for(r"refused a request for host 'evil\.example\.com'")  # each refusal is logged
        async with httpx.AsyncClient(base_url=base) as c:
            assert (await c.get("/healthz", headers={"host": f"localhost:{port}"})).status_code == 200
            assert (await c.get("/info")).status_code == 401
        client = EnvClient.http(base, name="mcqa", token=token)  # the normal client, given the token
        try:
            assert (await client.info())["name"] == "mcqa"
            session = await client.open(load_env("mcqa").examples()[0])
            await client.close(session.session_id)
        finally:
            await client.aclose()
    finally:
        server.stop()
    assert token not in " ".join(server.proc.args)  # type: ignore[arg-type]


def test_env_serve_no_token_is_explicit_and_still_checks_hosts(cli_env: dict[str, str], tmp_path: Path) -> None:
    server = Cli(["env", "serve", "mcqa", "--port", "0", "--no-token"], cli_env)
    try:
        port = int(server.wait_for(r"PALAESTRA_READY (\d+)").group(1))
        assert not (tmp_path / "runtime" / "palaestra").exists()
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base) as c:
            assert c.get("/info").status_code == 200
        _refusals(base, None, "/sessions")
    finally:
        server.stop()


async def test_supervised_env_process_gets_its_token_automatically(counter_spec: str) -> None:
    """The runtime's own local environment process asks for a token its client already has: the user does
    nothing, and the token is neither in the process's argv nor in its environment."""
    mounted = await mount_env(counter_spec, "local")
    try:
        assert mounted.token and mounted.base_url and mounted.process is not None
        task = Task(id="c1", env="counter", input="Reach 3.", metadata={"target": 3})
        session = await mounted.client.open(task)
        result = await mounted.client.call_tool(session.session_id, "add", {"amount": 3})
        assert result.error is None, result.error
        await mounted.client.close(session.session_id)
        pid = mounted.process.pid
        for what in ("cmdline", "environ"):
            seen = await asyncio.to_thread(Path(f"/proc/{pid}/{what}").read_bytes)
            assert mounted.token.encode() not in seen, what
        _refusals(mounted.base_url, mounted.token, "/sessions", orjson.dumps({"task": task.model_dump(mode="json")}))
        stranger = EnvClient.http(mounted.base_url, name="counter")
        try:
            with pytest.raises(PalaestraError, match="bearer token"):
                await stranger.open(task)
        finally:
            await stranger.aclose()
    finally:
        await mounted.stop()


# ---- the model proxy ---------------------------------------------------------------------------------
@pytest.fixture
def upstream() -> Iterator[tuple[str, list[str]]]:
    """A stand-in for a paid upstream API: it answers a chat completion and records the key it was sent."""
    seen: list[str] = []

    async def chat(request: Request) -> JSONResponse:
        seen.append(request.headers.get("authorization", ""))
        return JSONResponse({"id": "c1", "object": "chat.completion", "created": 0, "model": "up",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": "hello"}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    with serve_app(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])) as url:
        yield url + "/v1", seen


async def test_model_proxy_with_an_upstream_key_needs_its_token(cli_env: dict[str, str], tmp_path: Path,
                                                                upstream: tuple[str, list[str]]) -> None:
    up_url, seen = upstream
    token_file = tmp_path / "model.token"
    env = {**cli_env, "CANARY_UPSTREAM_KEY": "sk-canary-upstream-key"}
    server = Cli(["model", "serve", "--backend", f"openai:{up_url}", "--model-name", "up", "--port", "0",
                  "--api-key-env", "CANARY_UPSTREAM_KEY", "--token-file", str(token_file)], env)
    try:
        base = server.wait_for(r"model proxy on (http://127\.0\.0\.1:\d+)/v1").group(1)
        server.wait_for(r"saved in")
        token = _token_file(token_file)
        chat = orjson.dumps({"model": "up", "messages": [{"role": "user", "content": "hi"}]})
        _refusals(base, token, "/v1/chat/completions", chat)
        assert seen == []  # nothing refused reached the upstream, so no refused request spent the key
        # the runtime's own client, with the token as its API key (as `eval run --api-key-file` sends it)
        client = OpenAIBackend(base + "/v1", model="up", api_key=token)
        try:
            answer = await client.chat({"messages": [{"role": "user", "content": "hi"}]})
        finally:
            await client.aclose()
        assert answer["choices"][0]["message"]["content"] == "hello"
        assert seen == ["Bearer sk-canary-upstream-key"]
        async with httpx.AsyncClient(base_url=base) as c:  # Anthropic clients send the key as x-api-key
            r = await c.post("/v1/messages", headers={"x-api-key": token}, json={
                "model": "up", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text
    finally:
        server.stop()
    assert "sk-canary-upstream-key" not in server.output


def test_scripted_model_proxy_on_loopback_checks_hosts(cli_env: dict[str, str]) -> None:
    """A proxy that holds no key has no token by default on loopback, but still only answers its names."""
    server = Cli(["model", "serve", "--port", "0"], cli_env)
    try:
        base = server.wait_for(r"model proxy on (http://127\.0\.0\.1:\d+)/v1").group(1)
        with httpx.Client(base_url=base) as c:
            assert c.get("/v1/models").status_code == 200
            assert c.get("/v1/models", headers={"host": EVIL}).status_code == 400
        _refusals(base, None, "/v1/chat/completions")
    finally:
        server.stop()
    assert "token:" not in server.output


def test_off_loopback_bind_gets_a_token(cli_env: dict[str, str]) -> None:
    """127.0.0.2 is no loopback name here: binding it is binding beyond loopback, so a token is made."""
    server = Cli(["model", "serve", "--host", "127.0.0.2", "--port", "0"], cli_env)
    try:
        base = server.wait_for(r"model proxy on (http://127\.0\.0\.2:\d+)/v1").group(1)
        token = server.wait_for(r"token: (\S+)").group(1)
        with httpx.Client(base_url=base) as c:
            assert c.get("/v1/models").status_code == 401
            assert c.get("/v1/models", headers={"authorization": f"Bearer {token}"}).status_code == 200
            bad = c.get("/v1/models", headers={"authorization": f"Bearer {token}", "host": EVIL})
            assert bad.status_code == 400
    finally:
        server.stop()


# ---- the agent server ----------------------------------------------------------------------------------
async def test_agent_server_refuses_strangers_and_foreign_addresses(counter_spec: str) -> None:
    mounted = await mount_env(counter_spec, "local")
    assert mounted.token is not None
    model = serve_app(create_model_app(ModelProxy(ScriptedBackend("constant", constant_text="3"))), path="/v1")
    agent = serve_app(create_agent_app(), lifespan="auto")
    try:
        with model as model_url, agent as agent_url:
            task = Task(id="c1", env="counter", input="Reach 3.", metadata={"target": 3}).model_dump(mode="json")
            body = {"task": task, "env_url": mounted.base_url, "env_token": mounted.token, "model_base_url": model_url}
            _refusals(agent_url, None, "/run", orjson.dumps(body))
            async with httpx.AsyncClient(base_url=agent_url, timeout=60) as c:
                for field, url in (("env_url", "http://evil.example.com:8765"),
                                   ("model_base_url", "http://10.1.2.3:8000/v1"),
                                   ("env_url", "http://127.0.0.1@evil.example.com/")):
                    r = await c.post("/run", json={**body, field: url})
                    assert r.status_code == 400 and "allow-list" in r.json()["error"]["message"], r.text
                ok = await c.post("/run", json=body)
                assert ok.status_code == 200, ok.text
                assert ok.json()["outcome"]["status"] == "scored"
                assert mounted.token not in ok.text
    finally:
        await mounted.stop()


# ---- the viewer ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run with environment servers as local processes: their tokens need no user action."""
    out = tmp_path_factory.mktemp("run") / "mcqa"
    env = {k: v for k, v in os.environ.items() if k != "PALAESTRA_TOKEN"}
    proc = subprocess.run(CLI + ["eval", "run", "--env", "mcqa", "--model", "scripted:oracle", "--limit", "3",
                                 "--placement", "local", "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [orjson.loads(line) for line in (out / "rollouts.jsonl").read_bytes().splitlines() if line.strip()]
    assert len(records) == 3 and all(r["outcome"]["status"] == "scored" for r in records), records
    return out


_BROWSER = "/usr/bin/chromium"
_HAVE_BROWSER = importlib.util.find_spec("playwright") is not None and Path(_BROWSER).exists()


def test_viewer_url_carries_its_token(cli_env: dict[str, str], real_run: Path) -> None:
    server = Cli(["view", str(real_run), "--port", "0"], cli_env)
    try:
        url = server.wait_for(r"viewer: (http://127\.0\.0\.1:\d+/\?token=\S+)").group(1)
        base, token = url.split("/?token=")
        with httpx.Client(base_url=base) as c:
            for path in ("/", "/api/status", "/api/rows"):
                assert c.get(path).status_code == 401, path
            assert c.get("/api/status", params={"token": token}, headers={"host": EVIL}).status_code == 400
            page = c.get("/", params={"token": token})
            assert page.status_code == 200 and "palaestra_view_" in page.headers["set-cookie"]
            assert "samesite=strict" in page.headers["set-cookie"].lower()
            status = c.get("/api/status")  # the cookie now carries the token
            assert status.status_code == 200, status.text
        _refusals(base, token, "/api/status")
        if _HAVE_BROWSER:  # the page's own requests in a real browser, from the printed URL alone
            _in_thread(lambda: _browse(url, base))
    finally:
        server.stop()


def _in_thread(fn: Any) -> None:
    """Run ``fn`` in a thread of its own: Playwright's sync API refuses a thread that has an event loop,
    which the async tests of this module leave behind."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            failures.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the browser check did not finish within 120 s"
    if failures:
        raise failures[0]


def _browse(url: str, base: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_BROWSER, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_context().new_page()
            page.goto(url)
            expect(page.locator("#rows tbody tr.row")).to_have_count(3, timeout=30_000)  # the page's own fetches
            stranger = browser.new_context().new_page()
            response = stranger.goto(base + "/")
            assert response is not None and response.status == 401
        finally:
            browser.close()


# ---- the rollout service ---------------------------------------------------------------------------------
def test_rollout_service_needs_its_token_and_calls_only_allowed_policies(cli_env: dict[str, str],
                                                                         tmp_path: Path) -> None:
    token_file = tmp_path / "rollouts.token"
    server = Cli(["serve", "rollouts", "--port", "0", "--token-file", str(token_file), "--log-level", "warning"],
                 cli_env)
    task = load_env("mcqa").examples()[0].model_copy(update={"env": "mcqa"})
    policy = serve_app(create_model_app(ModelProxy(ScriptedBackend("constant", constant_text="A"))), path="/v1")
    try:
        base = server.wait_for(r"rollout service on (http://127\.0\.0\.1:\d+)").group(1)
        server.wait_for(r"saved in")
        token = _token_file(token_file)
        with policy as policy_url:
            job = {"tasks": [task.model_dump(mode="json")], "group_size": 2, "policy": {"base_url": policy_url}}
            _refusals(base, token, "/jobs", orjson.dumps(job))
            auth = {"authorization": f"Bearer {token}"}
            with httpx.Client(base_url=base, timeout=60) as c:
                assert c.post("/jobs", json=job).status_code == 401
                for foreign in ("http://evil.example.com/v1", "http://127.0.0.1@evil.example.com/v1",
                                "http://169.254.169.254/latest", "http://[::ffff:7f00:1]:8000/v1"):
                    r = c.post("/jobs", headers=auth, json={**job, "policy": {"base_url": foreign}})
                    assert r.status_code == 400 and "allow-list" in r.json()["error"]["message"], r.text
                made = c.post("/jobs", headers=auth, json=job)
                assert made.status_code == 201, made.text
                job_id = made.json()["job_id"]
                groups: list[Any] = []
                deadline = time.monotonic() + 120
                while not groups and time.monotonic() < deadline:
                    page = c.get(f"/jobs/{job_id}/groups", headers=auth, params={"wait_s": 10}).json()
                    groups += page["groups"]
                assert len(groups) == 1 and groups[0]["status"] == "complete", groups
    finally:
        server.stop()
    assert server.output.count(token) == 1
