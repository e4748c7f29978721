"""Talking to one OpenEnv episode: over its WebSocket contract (a running server) or in-process (the
OpenEnv ``Environment`` class itself), behind one small interface, so the adapter never cares which.

OpenEnv's HTTP ``/reset`` and ``/step`` are stateless (each request builds and drops an environment);
an episode lives on the ``/ws`` WebSocket, which is what OpenEnv's own ``EnvClient`` speaks. The remote
session therefore uses that client (``GenericEnvClient``: plain dicts, no environment package needed).
Also here: starting an OpenEnv server app on loopback for the duration of a ``with`` block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import inspect
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from palaestra.core.errors import BadArguments, ConfigError, EnvironmentFailure, ToolError
from palaestra.server.ports import free_port

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

    def __init__(self, url: str, timeout_s: float, headers: dict[str, str] | None = None) -> None:
        try:
            from openenv.core.generic_client import GenericEnvClient
        except ImportError as exc:
            raise ConfigError(f"OpenEnv is not installed ({exc})", hint=INSTALL_HINT) from None
        self.url = url
        self.client = GenericEnvClient(base_url=url, message_timeout_s=timeout_s,
                                       connect_timeout_s=min(timeout_s, 10.0), headers=headers or None)

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


def accepted_kwargs(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``fn`` accepts: all of them when it takes ``**kwargs``, else only those it
    names. OpenEnv's example environments declare ``reset(self)`` and ``step(self, action)``, while its
    default ``reset_async``/``step_async`` pass ``seed``, ``episode_id`` and ``timeout_s`` on."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return kwargs
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                   inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


async def _call(env: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``env.<name>_async`` where the environment overrides it, else its sync ``<name>``, each given only
    the keyword arguments its signature takes (the base class's async default would pass them all on)."""
    from openenv.core.env_server.interfaces import Environment as OpenEnvBase

    async_fn = getattr(env, f"{name}_async", None)
    base = getattr(OpenEnvBase, f"{name}_async", None)
    if async_fn is not None and getattr(type(env), f"{name}_async", None) is not base:
        return await async_fn(*args, **accepted_kwargs(async_fn, kwargs))
    sync_fn = getattr(env, name)
    return sync_fn(*args, **accepted_kwargs(sync_fn, kwargs))


def is_mcp_environment(env_cls: Any, action_cls: Any) -> bool:
    """An OpenEnv MCP environment (RFC 003): an ``MCPEnvironment``, or one whose action is the MCP
    ``CallToolAction`` itself; its tools are listed with ``list_tools`` and called with ``call_tool``."""
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    return (isinstance(env_cls, type) and issubclass(env_cls, MCPEnvironment)) or \
        action_cls in (CallToolAction, ListToolsAction)


def _tool_entry(raw: Any) -> dict[str, Any]:
    data = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
    schema = data.get("input_schema") or data.get("inputSchema") or data.get("parameters") or {}
    return {"name": data["name"], "description": data.get("description") or "", "input_schema": schema}


def list_local_tools(env_cls: Any) -> list[dict[str, Any]]:
    """The MCP tools of an in-process OpenEnv environment, listed once on a throwaway instance. Runs in
    its own thread and event loop: tool schemas are read from sync code that may sit inside a loop."""
    from openenv.core.env_server.mcp_types import ListToolsAction

    async def listing() -> list[dict[str, Any]]:
        env = env_cls()
        try:
            obs = await _call(env, "step", ListToolsAction())
        finally:
            with contextlib.suppress(Exception):
                env.close()
        error = (getattr(obs, "metadata", None) or {}).get("error")
        if error:
            raise EnvironmentFailure(f"OpenEnv list_tools failed: {error}")
        return [_tool_entry(t) for t in getattr(obs, "tools", [])]

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, listing()).result()


def list_remote_tools(url: str, timeout_s: float = 10.0,
                      headers: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The MCP tools of an OpenEnv server (JSON-RPC ``tools/list`` on ``POST /mcp``), or None when the
    environment there is no MCP environment (the server answers an error, or has no ``/mcp``)."""
    try:
        response = httpx.post(f"{url.rstrip('/')}/mcp", timeout=timeout_s, headers=headers,
                              json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1})
    except httpx.HTTPError as exc:
        raise EnvironmentFailure(f"cannot list the MCP tools of {url}: {exc}",
                                 hint="is an OpenEnv server running there?") from None
    if response.status_code in (401, 403):  # not "no MCP here": the server refused us
        raise EnvironmentFailure(f"{url}/mcp refused the request ({response.status_code})",
                                 hint="the server asks for a bearer token: set the variable named by "
                                      "openenv_token_env")
    if response.status_code in (404, 405):
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return None
    return [_tool_entry(t) for t in result["tools"]]


class LocalSession:
    """One episode of an OpenEnv ``Environment`` class run in this process (no server, no sockets)."""

    def __init__(self, env_cls: Any, action_cls: Any) -> None:
        self.env = env_cls()
        self.action_cls = action_cls

    async def reset(self, **kwargs: Any) -> StepOutcome:
        from openenv.core.env_server.serialization import serialize_observation

        return _outcome(serialize_observation(await _call(self.env, "reset", **kwargs)))

    async def step(self, action: dict[str, Any]) -> StepOutcome:
        from openenv.core.env_server.serialization import deserialize_action, serialize_observation
        from pydantic import ValidationError

        try:  # as OpenEnv's server does: MCP payloads ({"type": "call_tool", ...}) whatever the action class
            parsed = deserialize_action(action, self.action_cls)
        except ValidationError as exc:
            raise BadArguments(f"invalid action: {exc.errors()[0]['msg']}", hint="fix the action's fields") from None
        return _outcome(serialize_observation(await _call(self.env, "step", parsed)))

    async def close(self) -> None:
        self.env.close()


def fetch_schema(url: str, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The server's action schema (``GET /schema``), fetched once when the tools are first listed."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/schema", timeout=timeout_s, headers=headers)
        response.raise_for_status()
        action = response.json()["action"]
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        raise EnvironmentFailure(f"cannot read the action schema from {url}/schema: {exc}",
                                 hint="is an OpenEnv server running there?") from None
    if not isinstance(action, dict):
        raise EnvironmentFailure(f"{url}/schema: 'action' is not a JSON schema object")
    return action


@contextlib.contextmanager
def serve_openenv(app: str, *, port: int = 0, startup_s: float = 90.0, env: dict[str, str] | None = None,
                  cwd: str | None = None) -> Iterator[str]:
    """Run an OpenEnv server app (``module:app``) with uvicorn on 127.0.0.1 and yield its URL; the
    process is stopped when the block ends, whatever happens inside it."""
    port = port or free_port()
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
