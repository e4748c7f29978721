"""The bind rule: a server beyond loopback never starts without a bearer token. The checks each request
goes through (Host, Origin, token) live in ``palaestra.server.security``; ``BearerAuth`` here is the bare
token check, kept for apps embedded elsewhere."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from palaestra.core.errors import ConfigError
from palaestra.server.security import LOOPBACK
from palaestra.wire.errors import error_bytes

__all__ = ["LOOPBACK", "TOKEN_ENV", "BearerAuth", "check_bind", "protect", "token_from_env"]
TOKEN_ENV = "PALAESTRA_TOKEN"


def token_from_env(var: str = TOKEN_ENV) -> str | None:
    """The token in the variable ``var`` (a server's ``--token-env``; ``$PALAESTRA_TOKEN`` by default)."""
    from palaestra.settings import variable

    return variable(var)


def check_bind(host: str, token: str | None, *, token_env: str = TOKEN_ENV) -> None:
    """Refuse a non-loopback bind without a token: such a server would run tools for anyone on the net."""
    if host not in LOOPBACK and not token:
        raise ConfigError(
            f"refusing to bind {host}: only loopback is allowed without an auth token",
            hint=f"bind 127.0.0.1, or set {token_env} to a long random secret (clients send it as a bearer token)",
        )
    if token is not None and len(token) < 16:
        raise ConfigError("the auth token is too short", hint="use at least 16 random characters")


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``, except the
    health probe (it reveals nothing and load balancers need it)."""

    def __init__(self, app: ASGIApp, token: str, *, open_paths: tuple[str, ...] = ("/healthz",)) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._open = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self._open:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        body = error_bytes("unauthorized", "missing or wrong bearer token",
                           "send Authorization: Bearer <the server token>")
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})


def protect(app: ASGIApp, token: str | None) -> ASGIApp:
    return BearerAuth(app, token) if token else app
