"""Who may talk to a Palaestra server, checked in ONE place for every app it serves.

Binding 127.0.0.1 keeps other machines out, not web pages: through DNS rebinding, a page the user visits
can send same-origin requests to 127.0.0.1 under its own host name, and a cross-site form can POST there.
So every served app is wrapped in :class:`Guard`, which, before any route runs:

1. accepts only the host names the server is meant to be reached by (``Host``): on loopback 127.0.0.1,
   localhost and [::1] with the server's own port; off loopback also the configured names. Anything else
   is a 400, logged (a rebinding page is refused whatever it sends next);
2. refuses any request whose ``Origin`` is not the server's own (a browser on another site) and every
   CORS preflight, so no route ever answers a preflight, let alone with a wildcard;
3. asks for the server's bearer token when it has one (``Authorization: Bearer``, or ``x-api-key`` as
   Anthropic clients send it; for the viewer also ``?token=``, which sets a per-port cookie, like
   Jupyter's), compared in constant time.

Servers that hold power (environment servers, the rollout service, a model proxy in front of an upstream
key) get a random token by default; see :func:`choose_token`.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from palaestra.core.errors import ConfigError
from palaestra.wire.errors import error_bytes

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("palaestra.server.security")

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
MIN_TOKEN_LEN = 16

__all__ = ["LOOPBACK", "Guard", "GuardPolicy", "choose_token", "default_token_file", "host_allowed",
           "is_loopback", "new_token", "normal_host", "secure", "url_host_allowed", "write_token_file"]


def is_loopback(host: str) -> bool:
    return host.strip("[]").lower() in LOOPBACK


def normal_host(name: str) -> str:
    """A host name as it appears in a ``Host`` header: lower case, an IPv6 address in brackets."""
    name = name.strip().lower()
    if ":" in name and not name.startswith("["):
        if name.count(":") == 1:  # "name:port"
            return name
        return f"[{name}]"
    return name


def _split(hostport: str) -> tuple[str, int | None] | None:
    """``name[:port]`` -> (name, port); None when it is not a well-formed Host value."""
    value = hostport.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[:end + 1], value[end + 1:]
    elif value.count(":") > 1:
        return None  # an unbracketed IPv6 address is no valid Host value
    else:
        name, _, port_text = value.partition(":")
        rest = ":" + port_text if ":" in value else ""
    if not rest:
        return name, None
    if not rest.startswith(":") or not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name, int(rest[1:])


@dataclass(frozen=True)
class GuardPolicy:
    """What :class:`Guard` enforces for one server.

    ``allowed_hosts`` are extra names (``name`` or ``name:port``; ``*`` accepts any) besides loopback's;
    ``token`` None means none is asked; ``open_paths`` skip the token (never the Host check);
    ``cookie_prefix`` (the viewer) lets ``?token=`` set a cookie named with the server's port, so two
    viewers on one machine do not overwrite each other's."""

    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    open_paths: tuple[str, ...] = ("/healthz",)
    cookie_prefix: str | None = None
    unauthorized_message: str = "missing or wrong bearer token"
    unauthorized_hint: str = "send Authorization: Bearer <the server token> (printed at start, and in its token file)"
    _names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_names", frozenset(normal_host(h) for h in self.allowed_hosts))

    @classmethod
    def for_bind(cls, bind: str, *, token: str | None = None, allowed_hosts: Iterable[str] = (),
                 **kwargs: object) -> GuardPolicy:
        """The policy of a server bound to ``bind``: a specific non-loopback address is one of its names;
        a wildcard bind must be told its names (``--allowed-host``), since no name is implied."""
        names = [h for h in allowed_hosts if h]
        if not is_loopback(bind):
            if bind in _WILDCARD_BINDS:
                if not names:
                    raise ConfigError(
                        f"binding {bind or 'all addresses'} needs the host names clients will use",
                        hint="pass --allowed-host NAME (repeat it; NAME or NAME:PORT), or --allowed-host '*' to "
                             "accept any name and rely on the token alone")
            else:
                names.append(bind)
        return cls(token=token, allowed_hosts=tuple(names), **kwargs)  # type: ignore[arg-type]


def host_allowed(host_header: str, server_port: int | None, policy: GuardPolicy) -> bool:
    """Is ``host_header`` a name this server answers to? Loopback names must carry the server's own port
    (or none, on port 80); configured names any port, unless they name one."""
    parsed = _split(host_header)
    if parsed is None:
        return False
    name, port = parsed
    if name in _LOOPBACK_NAMES:
        return server_port is None or port == server_port or (port is None and server_port == 80)
    names = policy._names
    if "*" in names:
        return True
    if name in names:
        return True
    return port is not None and f"{name}:{port}" in names


def url_host_allowed(url: str, allowed: Iterable[str] = ()) -> bool:
    """May a server call ``url``? Only http(s) to loopback or to one of ``allowed`` (``name`` or
    ``name:port``; ``*`` for any): what keeps a rollout service or an agent server from being an open
    relay to arbitrary addresses. Names are compared as written: ``127.1`` or ``2130706433`` is no
    loopback here."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    name = normal_host(parts.hostname)
    names = {normal_host(a) for a in allowed}
    if name in _LOOPBACK_NAMES or "*" in names or name in names:
        return True
    return port is not None and f"{name}:{port}" in names


class Guard:
    """ASGI middleware applying a :class:`GuardPolicy` to every HTTP and WebSocket request."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy
        self._token = policy.token.encode() if policy.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host", "")
        server = scope.get("server")
        port = server[1] if isinstance(server, (tuple, list)) and len(server) > 1 else None
        if not host_allowed(host, port, self.policy):
            client = scope.get("client")
            log.warning("refused a request for host %r from %s (%s %s): not a name this server answers to",
                        host[:200], client[0] if client else "?", scope.get("method", "WS"), scope.get("path", ""))
            await _refuse(scope, receive, send, 400, "bad_host",
                          f"host {host[:200]!r} is not a name this server answers to",
                          "reach it as 127.0.0.1, localhost or [::1] with its port (or a name given with "
                          "--allowed-host)")
            return
        origin = headers.get("origin")
        if scope["type"] == "http" and scope.get("method") == "OPTIONS" and (
                origin is not None or "access-control-request-method" in headers):
            await _refuse(scope, receive, send, 403, "cross_origin", "cross-origin requests are not allowed",
                          "call this server from a program, not from a web page on another site")
            return
        if origin is not None and not _same_origin(origin, host):
            log.warning("refused a request from origin %r (%s %s)", origin[:200], scope.get("method", "WS"),
                        scope.get("path", ""))
            await _refuse(scope, receive, send, 403, "cross_origin",
                          f"requests from origin {origin[:200]!r} are not allowed",
                          "call this server from a program, not from a web page on another site")
            return
        if self._token is None or scope.get("path") in self.policy.open_paths:
            await self.app(scope, receive, send)
            return
        given, from_query = self._given(scope, headers)
        if given is None or not hmac.compare_digest(given, self._token):
            await _refuse(scope, receive, send, 401, "unauthorized", self.policy.unauthorized_message,
                          self.policy.unauthorized_hint, extra=[(b"www-authenticate", b"Bearer")])
            return
        if from_query and self.policy.cookie_prefix and scope["type"] == "http":
            await self.app(scope, receive, self._with_cookie(send, port))
            return
        await self.app(scope, receive, send)

    def _cookie_name(self, port: int | None) -> str:
        return f"{self.policy.cookie_prefix}_{port or 0}"

    def _given(self, scope: Scope, headers: dict[str, str]) -> tuple[bytes | None, bool]:
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip().encode(), False
        if "x-api-key" in headers:
            return headers["x-api-key"].strip().encode(), False
        if self.policy.cookie_prefix:
            server = scope.get("server")
            port = server[1] if isinstance(server, (tuple, list)) and len(server) > 1 else None
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if "token" in query:
                return query["token"].encode(), True
            if "cookie" in headers:
                from http.cookies import SimpleCookie

                jar: SimpleCookie = SimpleCookie()
                try:
                    jar.load(headers["cookie"])
                except Exception:  # a malformed cookie header is no token
                    return None, False
                morsel = jar.get(self._cookie_name(port))
                if morsel is not None:
                    return morsel.value.encode(), False
        return None, False

    def _with_cookie(self, send: Send, port: int | None) -> Send:
        assert self.policy.token is not None
        cookie = (f"{self._cookie_name(port)}={self.policy.token}; HttpOnly; SameSite=Strict; Path=/").encode()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        return sending


_WANTED = frozenset({b"host", b"origin", b"authorization", b"x-api-key", b"cookie", b"access-control-request-method"})


def _headers(scope: Scope) -> dict[str, str]:
    """The few headers the checks read (ASGI servers give names in lower case), decoded once. Two Host or
    Origin headers leave none valid (an app could read the other one than the check did)."""
    out: dict[str, str] = {}
    for k, v in scope.get("headers") or []:
        if k in _WANTED:
            name = k.decode("latin-1")
            if name in out and name in ("host", "origin"):
                out[name] = "\x00duplicate"
                continue
            out[name] = v.decode("latin-1")
    return out


def _same_origin(origin: str, host: str) -> bool:
    """The browser's Origin names this very server (scheme, host and port as the request's Host)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower() and not parts.path


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, kind: str, message: str, hint: str,
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008, "reason": kind})
        return
    body = error_bytes(kind, message, hint)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def secure(app: ASGIApp, policy: GuardPolicy) -> ASGIApp:
    """``app`` behind the Host, Origin and token checks: what every Palaestra server serves."""
    return Guard(app, policy)


# ---- tokens ----------------------------------------------------------------------------------------
def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe (it goes in a viewer URL as it is)."""
    return secrets.token_urlsafe(32)


def choose_token(host: str, *, given: str | None, no_token: bool, default_on: bool) -> str | None:
    """The token a server starts with: the one the user gave, else a fresh one when ``default_on`` (a
    server that holds power) or when bound beyond loopback; None only when there is no reason for one
    or when the user explicitly opted out (``--no-token``), which is refused off loopback."""
    if no_token:
        if not is_loopback(host):
            raise ConfigError(f"--no-token is only allowed on loopback, not on {host}",
                              hint="drop --no-token (a token is generated), or bind 127.0.0.1")
        if given:
            raise ConfigError("both a token and --no-token were given", hint="choose one")
        return None
    if given is not None:
        if len(given) < MIN_TOKEN_LEN:
            raise ConfigError("the auth token is too short", hint=f"use at least {MIN_TOKEN_LEN} random characters")
        return given
    if default_on or not is_loopback(host):
        return new_token()
    return None


def default_token_file(kind: str, port: int, runtime_dir: str | None = None) -> Path:
    """Where a server without a run directory keeps its token: ``$XDG_RUNTIME_DIR/palaestra/`` (a per-user
    0700 tmpfs on most Linux systems), else ``~/.cache/palaestra/tokens/``; named by kind and port so
    clients can find it. The caller passes ``runtime_dir`` (the CLI reads the variable)."""
    base = Path(runtime_dir) / "palaestra" if runtime_dir else Path.home() / ".cache" / "palaestra" / "tokens"
    return base / f"{kind}-{port}.token"


def write_token_file(path: str | Path, token: str) -> Path:
    """Write ``token`` to ``path``, readable by this user only (0600, directory 0700 when created here);
    an existing file is replaced, never left with wider permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path
