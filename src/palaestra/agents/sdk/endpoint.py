"""A rollout's model endpoint on 127.0.0.1 for an in-process agent SDK.

An SDK (openai-agents, smolagents, strands-agents) talks HTTP to an OpenAI-compatible base URL through
its own client; it cannot be handed Palaestra's ``ChatModel``. So each rollout serves the model proxy's
HTTP app on a loopback port of its own, in the caller's event loop, behind the usual Host/Origin checks
and a fresh bearer token (which the SDK sends as its API key). Every call goes through the rollout's
``ChatModel`` (so the run's proxy records it with its token ids), and the endpoint's own records give the
SDK's conversation in chat form. Same backend and step limit as the external CLIs' endpoint.
"""

from __future__ import annotations

from typing import Any

import uvicorn

from palaestra.agents.base import ChatModel
from palaestra.agents.external.endpoint import ChatModelBackend, InTaskServer, LocalProxy
from palaestra.core.errors import AgentError
from palaestra.core.records import ModelCallRecord
from palaestra.server.model_app import create_model_app
from palaestra.server.security import GuardPolicy, new_token, secure

LABEL = "sdk"


class LoopbackEndpoint:
    """``async with LoopbackEndpoint(model, sampling) as ep``: ``ep.openai_base`` is the ``/v1`` URL to
    give the SDK, ``ep.token`` its API key; ``ep.calls()`` the calls it made."""

    def __init__(self, model: ChatModel, sampling: dict[str, Any] | None = None,
                 call_limit: int | None = None) -> None:
        self.backend = ChatModelBackend(model, sampling, call_limit)
        self.proxy = LocalProxy(self.backend)
        self.proxy.register(LABEL)
        self.token = new_token()
        self.port = 0
        self._served = InTaskServer()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/rollouts/{LABEL}"

    @property
    def openai_base(self) -> str:
        return self.base_url + "/v1"

    def calls(self) -> list[ModelCallRecord]:
        """The calls served so far (chat form, dialect in ``api``); the endpoint forgets them."""
        return self.proxy.pop_calls(LABEL)

    async def __aenter__(self) -> LoopbackEndpoint:
        app = secure(create_model_app(self.proxy), GuardPolicy(token=self.token))
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                access_log=False, timeout_graceful_shutdown=1)
        server = await self._served.start(config, rounds=1000)
        if server is None:
            raise AgentError("the loopback model endpoint for an agent SDK did not start on 127.0.0.1",
                             hint="check that loopback TCP sockets can be bound here")
        self.port = int(server.servers[0].sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._served.stop()
