"""Talking to one OpenEnv episode: over its WebSocket contract (a running server) or in-process (the
OpenEnv ``Environment`` class itself), behind one small interface, so the adapter never cares which.

OpenEnv's HTTP ``/reset`` and ``/step`` are stateless (each request builds and drops an environment);
an episode lives on the ``/ws`` WebSocket, which is what OpenEnv's own ``EnvClient`` speaks. The remote
session therefore uses that client (``GenericEnvClient``: plain dicts, no environment package needed).
Also here: starting an OpenEnv server app on loopback for the duration of a ``with`` block.
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from palaestra.core.errors import BadArguments, ConfigError, EnvironmentFailure, ToolError

INSTALL_HINT = "install OpenEnv: pip install 'palaestra[openenv]' (the `openenv` package)"


@dataclass
class StepOutcome:
    """One OpenEnv ``StepResult`` as plain data: the observation fields, reward and done."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] | None = None


class OpenEnvSession(Protocol):
    async def reset(self, **kwargs: Any) -> StepOutcome: ...
    async def step(self, action: dict[str, Any]) -> StepOutcome: ...
    async def close(self) -> None: ...


def clean_action_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenEnv Action's JSON schema as tool parameters: ``metadata`` is the framework's, not the
    model's, and unknown fields are refused (OpenEnv's Action forbids extras too)."""
    out = copy.deepcopy(schema)
    out.pop("title", None)
    props = out.setdefault("properties", {})
    props.pop("metadata", None)
    for prop in props.values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    if isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r != "metadata"]
    out["type"] = "object"
    out["additionalProperties"] = False
    return out


def _outcome(payload: dict[str, Any]) -> StepOutcome:
    reward = payload.get("reward")
    return StepOutcome(observation=dict(payload.get("observation") or {}),
                       reward=None if reward is None else float(reward), done=bool(payload.get("done", False)),
                       metadata=payload.get("metadata"))


class RemoteSession:
    """One episode on a running OpenEnv server, through OpenEnv's own WebSocket client."""

    def __init__(self, url: str, timeout_s: float) -> None:
        try:
            from openenv.core.generic_client import GenericEnvClient
        except ImportError as exc:
            raise ConfigError(f"OpenEnv is not installed ({exc})", hint=INSTALL_HINT) from None
        self.url = url
        self.client = GenericEnvClient(base_url=url, message_timeout_s=timeout_s,
                                       connect_timeout_s=min(timeout_s, 10.0))

    async def _call(self, what: str, coro: Any) -> StepOutcome:
        try:
            result = await coro
        except RuntimeError as exc:  # the server answered with an error frame: the action failed
            raise ToolError(f"OpenEnv {what} failed: {exc}",
                            hint="read the error and send a different action") from None
        except (OSError, TimeoutError, ConnectionError) as exc:
            raise EnvironmentFailure(f"OpenEnv server at {self.url}: {what} failed: {type(exc).__name__}: {exc}",
                                     hint="is the OpenEnv server running and reachable?") from None
        except Exception as exc:  # websockets' ConnectionClosed and friends
            raise EnvironmentFailure(f"OpenEnv server at {self.url}: {what} failed: {type(exc).__name__}: {exc}",
                                     hint="the episode's WebSocket closed; check the server's log") from None
        return StepOutcome(observation=dict(result.observation or {}), done=bool(result.done),
                           reward=None if result.reward is None else float(result.reward), metadata=result.metadata)

    async def reset(self, **kwargs: Any) -> StepOutcome:
        try:
            await self.client.connect()
        except Exception as exc:
            raise EnvironmentFailure(f"cannot open an OpenEnv episode at {self.url}: {exc}",
                                     hint="start the server (or check openenv_url) and retry") from None
        return await self._call("reset", self.client.reset(**kwargs))

    async def step(self, action: dict[str, Any]) -> StepOutcome:
        return await self._call("step", self.client.step(action))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()


class LocalSession:
    """One episode of an OpenEnv ``Environment`` class run in this process (no server, no sockets)."""

    def __init__(self, env_cls: Any, action_cls: Any) -> None:
        self.env = env_cls()
        self.action_cls = action_cls

    async def reset(self, **kwargs: Any) -> StepOutcome:
        from openenv.core.env_server.serialization import serialize_observation

        return _outcome(serialize_observation(await self.env.reset_async(**kwargs)))

    async def step(self, action: dict[str, Any]) -> StepOutcome:
        from openenv.core.env_server.serialization import serialize_observation
        from pydantic import ValidationError

        try:
            parsed = self.action_cls.model_validate(action)
        except ValidationError as exc:
            raise BadArguments(f"invalid action: {exc.errors()[0]['msg']}", hint="fix the action's fields") from None
        return _outcome(serialize_observation(await self.env.step_async(parsed)))

    async def close(self) -> None:
        self.env.close()


def fetch_schema(url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The server's action schema (``GET /schema``), fetched once when the tools are first listed."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/schema", timeout=timeout_s)
        response.raise_for_status()
        action = response.json()["action"]
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise EnvironmentFailure(f"cannot read the action schema from {url}/schema: {exc}",
                                 hint="is an OpenEnv server running there?") from None
    if not isinstance(action, dict):
        raise EnvironmentFailure(f"{url}/schema: 'action' is not a JSON schema object")
    return action


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve_openenv(app: str, *, port: int = 0, startup_s: float = 90.0, env: dict[str, str] | None = None,
                  cwd: str | None = None) -> Iterator[str]:
    """Run an OpenEnv server app (``module:app``) with uvicorn on 127.0.0.1 and yield its URL; the
    process is stopped when the block ends, whatever happens inside it."""
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    child_env = {**os.environ, **(env or {})}
    log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server must never block on a full pipe
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], env=child_env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=log)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                log.seek(0)
                err = log.read().decode(errors="replace")[-2000:]
                raise EnvironmentFailure(f"OpenEnv server '{app}' exited with {proc.returncode}: {err}",
                                         hint="run it by hand with uvicorn to see why")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise EnvironmentFailure(f"OpenEnv server '{app}' did not answer {url}/health in {startup_s:g}s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
