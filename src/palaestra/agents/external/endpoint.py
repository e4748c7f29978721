"""A rollout's model endpoint for an external CLI: the model proxy's HTTP app on a private unix socket.

An agent only receives a ``ChatModel`` (for a rollout: ``BackendChat(proxy, rollout_id)``), while a CLI
needs a base URL in its own dialect (OpenAI Responses or Chat, Anthropic Messages). So each run serves
``create_model_app`` over a small ``ModelProxy`` whose backend is that ChatModel: the dialect is
translated here, every call still goes through the rollout's ChatModel (and so is recorded by the
runner's proxy for this rollout), and the local records give the CLI's conversation in chat form.
The socket lives in a private temp directory; the CLI reaches it only through the jail's forwarder.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import uvicorn

from palaestra.agents.base import ChatModel
from palaestra.agents.external.gemini_wire import gemini_routes
from palaestra.core.errors import AgentError, ModelError
from palaestra.core.records import ModelCallRecord
from palaestra.models.base import CallContext
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import Api, ModelProxy

Body = dict[str, Any]


class ChatModelBackend:
    """The rollout's ChatModel as a ModelBackend. The run's sampling settings override the CLI's own
    (a harness must not change the temperature an evaluation asked for); model errors are kept so the
    runner can report ``failed(model)`` rather than whatever the CLI made of a 502. Past
    ``call_limit`` calls it answers 400 without calling the model, which ends any CLI's loop."""

    name = "rollout-model"

    def __init__(self, model: ChatModel, sampling: dict[str, Any] | None = None,
                 call_limit: int | None = None) -> None:
        self.model = model
        self.sampling = dict(sampling or {})
        self.call_limit = call_limit
        self.calls = 0
        self.limit_hit = False
        self.errors: list[ModelError] = []

    async def chat(self, request: Body, ctx: CallContext) -> Body:
        self.calls += 1
        if self.call_limit is not None and self.calls > self.call_limit:
            self.limit_hit = True
            raise ModelError(f"step limit reached: this run allows {self.call_limit} model calls", status=400,
                             hint="raise the agent's max_steps")
        try:
            return await self.model.chat({**request, **self.sampling})
        except ModelError as exc:
            self.errors.append(exc)
            raise

    async def aclose(self) -> None:
        return None


def fold_system_turns(body: Body) -> Body:
    """Anthropic requests from newer CLIs (Claude Code 2.x) carry ``role: system`` turns inside
    ``messages``; the chat translation takes only user/assistant turns, so their text joins the
    top-level ``system`` (where a chat model reads it anyway)."""
    turns = body.get("messages")
    if not isinstance(turns, list) or not any(isinstance(t, dict) and t.get("role") == "system" for t in turns):
        return body
    system = body.get("system") or []
    blocks: list[Any] = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
    kept = []
    for turn in turns:
        if isinstance(turn, dict) and turn.get("role") == "system":
            content = turn.get("content")
            blocks += [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        else:
            kept.append(turn)
    return {**body, "system": blocks, "messages": kept}


class LocalProxy(ModelProxy):
    """A ModelProxy that also accepts the Anthropic request shapes current CLIs send."""

    async def complete(self, rollout_id: str | None, api: Api, body: Body) -> Body:
        if api == "messages":
            body = fold_system_turns(body)
        return await super().complete(rollout_id, api, body)


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: it runs inside the caller's event loop, whose Ctrl-C and
    SIGTERM belong to the run, not to one rollout's endpoint."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class InTaskServer:
    """A rollout's model endpoint served by uvicorn as a task of the running event loop: ``start`` returns
    once it accepts connections (None when it could not start: it is stopped then), ``stop`` ends it
    without waiting long on clients that keep connections open."""

    def __init__(self) -> None:
        self.server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, config: uvicorn.Config, rounds: int) -> _QuietServer | None:
        self.server = server = _QuietServer(config)
        self._task = asyncio.create_task(server.serve())
        for _ in range(rounds):
            if server.started:
                return server
            if self._task.done():
                break
            await asyncio.sleep(0.01)
        await self.stop()
        return None

    async def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
            self.server.force_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 5.0)
        self.server = self._task = None


class ModelEndpoint:
    """``async with ModelEndpoint(model, sampling) as ep``: ``ep.uds`` is the socket to forward to;
    ``ep.path_prefix`` the URL path (``/rollouts/<id>``) that names this run's calls."""

    def __init__(self, model: ChatModel, sampling: dict[str, Any] | None = None, label: str = "cli",
                 call_limit: int | None = None) -> None:
        self.backend = ChatModelBackend(model, sampling, call_limit)
        self.proxy = LocalProxy(self.backend)
        self.label = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:64] or "cli"
        self.proxy.register(self.label)
        self._dir = ""
        self._served = InTaskServer()

    @property
    def uds(self) -> str:
        return os.path.join(self._dir, "model.sock")

    @property
    def path_prefix(self) -> str:
        return f"/rollouts/{self.label}"

    def calls(self) -> list[ModelCallRecord]:
        """The calls served so far (chat form, dialect in ``api``); the endpoint forgets them."""
        return self.proxy.pop_calls(self.label)

    async def __aenter__(self) -> ModelEndpoint:
        self._dir = tempfile.mkdtemp(prefix="pal-ep-")  # short: a socket path must fit in 108 bytes
        os.chmod(self._dir, 0o700)
        app = create_model_app(self.proxy)
        app.router.routes.extend(gemini_routes(self.proxy))  # Gemini CLI speaks Google's generateContent
        config = uvicorn.Config(app, uds=self.uds, log_level="warning", lifespan="off",
                                access_log=False, timeout_graceful_shutdown=1)
        if await self._served.start(config, rounds=500) is None:
            await self.__aexit__(None, None, None)
            raise AgentError(f"the model endpoint for an external CLI did not start on {self.uds}",
                             hint="check that the temp directory is writable and allows unix sockets")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._served.stop()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
