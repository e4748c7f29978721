"""Servers off loopback need a token; with a token, requests without it are rejected."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx

from palaestra.client.env_client import EnvClient
from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task
from palaestra.server.ports import free_port

CLI = [sys.executable, "-m", "palaestra.cli.main"]
TOKEN = "t0ken-" + "x" * 30


def test_public_bind_never_runs_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PALAESTRA_TOKEN"}
    # off loopback a token is generated (tests/server/test_security.py serves one); opting out is refused
    for cmd in (["env", "serve", "mcqa", "--host", "0.0.0.0", "--no-token"],
                ["model", "serve", "--host", "0.0.0.0", "--no-token"]):
        proc = subprocess.run(CLI + cmd, capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "--no-token is only allowed on loopback" in proc.stderr
    # a wildcard bind must be told the names its clients use
    proc = subprocess.run(CLI + ["env", "serve", "mcqa", "--host", "0.0.0.0"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 2 and "--allowed-host" in proc.stderr, proc.stderr


def test_short_token_is_refused() -> None:
    proc = subprocess.run(CLI + ["env", "serve", "mcqa", "--host", "0.0.0.0"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PALAESTRA_TOKEN": "short"})
    assert proc.returncode == 2 and "too short" in proc.stderr


async def test_token_protected_env_server() -> None:
    port = free_port()
    proc = subprocess.Popen(CLI + ["env", "serve", "mcqa", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "PALAESTRA_TOKEN": TOKEN})
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as raw:
            for _ in range(200):
                try:
                    if (await raw.get(base + "/healthz")).status_code == 200:  # the health probe stays open
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            r = await raw.get(base + "/info")
            assert r.status_code == 401 and r.json()["error"]["kind"] == "unauthorized"
            assert (await raw.get(base + "/info", headers={"authorization": "Bearer wrong"})).status_code == 401
        good = EnvClient.http(base, name="mcqa", token=TOKEN)
        bad = EnvClient.http(base, name="mcqa")
        try:
            assert (await good.info())["name"] == "mcqa"
            task = Task(id="q", input="Q?", metadata={"options": ["x", "y"], "expected_answer": "A"})
            session = await good.open(task)
            await good.close(session.session_id)
            try:
                await bad.open(task)
                raise AssertionError("an unauthenticated client opened a session")
            except PalaestraError as exc:
                assert "bearer token" in str(exc)
        finally:
            await good.aclose()
            await bad.aclose()
    finally:
        proc.terminate()
        proc.wait(10)
