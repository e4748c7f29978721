"""How a client reaches a server: over the network with aiohttp (several times cheaper per request than
httpx on this hot path), or straight into an in-process ASGI app through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from palaestra.core.deadline import time_limit

if TYPE_CHECKING:  # imported when a network transport is first used: a run whose environments and model all
    import aiohttp  # live in-process never pays aiohttp's import (~0.1 s, most of it its default TLS contexts)


class TransportFailure(Exception):
    """The request never got an HTTP answer: ``timeout`` or ``unreachable``."""

    def __init__(self, kind: str, detail: str, *, hint: str | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.hint = hint


class Transport(Protocol):
    base_url: str

    async def request(self, method: str, path: str, content: bytes | None) -> tuple[int, bytes]: ...
    async def aclose(self) -> None: ...


class NetworkTransport:
    """aiohttp over TCP. The session is created lazily inside the running event loop."""

    def __init__(self, base_url: str, *, timeout: float = 60.0, max_connections: int = 1024,
                 headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout
        self._limit = max_connections
        self._headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None
        self._client_error: type[Exception] = OSError

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            import aiohttp

            self._client_error = aiohttp.ClientError
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=30),
                timeout=aiohttp.ClientTimeout(),  # none of aiohttp's: a request's timeout is a deadline (below)
                headers=self._headers,
            )
        return self._session

    async def request(self, method: str, path: str, content: bytes | None) -> tuple[int, bytes]:
        """One request and its whole answer, within the transport's timeout (``core.deadline``: the requests
        in flight share one loop timer, where aiohttp's timeout arms and cancels one per request)."""
        try:
            with time_limit(self._timeout):
                return await self._request(method, path, content)
        except asyncio.TimeoutError as exc:
            raise TransportFailure("timeout", f"no answer within {self._timeout:g} s") from exc
        except self._client_error as exc:
            raise TransportFailure("unreachable", repr(exc)) from exc

    async def _request(self, method: str, path: str, content: bytes | None) -> tuple[int, bytes]:
        async with self._get_session().request(method, self.base_url + path, data=content) as resp:
            return resp.status, await resp.read()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class AsgiTransport:
    """Calls an ASGI app in this process: no socket, same HTTP semantics."""

    def __init__(self, app: Any, *, timeout: float = 60.0, headers: dict[str, str] | None = None) -> None:
        import httpx  # only in-process placements need it: the network path stays free of its import cost

        self._httpx = httpx
        self.base_url = "http://inprocess"
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=self.base_url,
                                         timeout=timeout, headers=headers)

    async def request(self, method: str, path: str, content: bytes | None) -> tuple[int, bytes]:
        try:
            resp = await self._client.request(method, path, content=content)
        except self._httpx.TimeoutException as exc:
            raise TransportFailure("timeout", repr(exc)) from exc
        except self._httpx.TransportError as exc:
            raise TransportFailure("unreachable", repr(exc)) from exc
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self._client.aclose()
