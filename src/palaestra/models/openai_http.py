"""A backend for any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI, OpenRouter, llama.cpp).

Rollouts run thousands of calls against one upstream, so this client keeps a single shared
connection pool sized to an explicit concurrency limit, bounds every call with a timeout, and
retries only what is worth retrying (connection trouble, timeouts, 408/409/429 and 5xx), honouring
``Retry-After``. Everything else fails fast as a ``ModelError`` that says what to fix.

It speaks aiohttp, not httpx: against a local upstream it costs a fraction of httpx's CPU per request.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from palaestra.core.deadline import time_limit
from palaestra.core.errors import ConfigError, ModelError
from palaestra.core.secrets import read_secret_file, redact_url
from palaestra.models.base import CallContext

RETRY_STATUSES = frozenset({408, 409, 429})
# A call's timeout is a deadline (``core.deadline.within``: the calls of a backend share one timer), not
# aiohttp's: its ClientTimeout arms and cancels a loop timer per request (an object on the loop's heap,
# compared in Python as it is pushed and popped). Every request passes this one, which has no timeout, so
# a session the caller gave keeps no timer of its own either; a session made here has none to begin with.
_NO_TIMER = aiohttp.ClientTimeout()
KEEPALIVE_S = 30.0  # idle pooled connections are kept this long; a closed one is detected and dropped


def api_key_from_env(var: str = "OPENAI_API_KEY", file: str | Path | None = None) -> str | None:
    """Read an API key from ``file`` (when given) or the environment variable ``var``.

    A file keeps the key out of process listings and shell history; a missing file is a config
    mistake, so it raises instead of silently falling back to no key.
    """
    if file is not None:
        return read_secret_file(file, "the API key file",
                                hint="point the key file option at a readable file holding only the key",
                                empty_hint="write the key into it")
    from palaestra.settings import variable  # the variable the run's api_key_env names

    return variable(var)


def retry_after_seconds(value: str | None, *, cap: float = 60.0) -> float | None:
    """Parse a ``Retry-After`` header (delta-seconds or an HTTP date) into seconds, capped at ``cap``."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time() if when is not None else math.nan
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), cap)


def _snippet(text: str, limit: int = 200) -> str:
    text = text.strip().replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _error_detail(content: bytes) -> str:
    """The upstream's own error message when it sent the usual ``{"error": {"message": ...}}``."""
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return _snippet(content.decode("utf-8", "replace"))
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict) and err.get("message"):
            return _snippet(str(err["message"]))
        if err:
            return _snippet(str(err))
    return _snippet(content.decode("utf-8", "replace"))


def env_proxy(url: str) -> str | None:
    """The HTTP(S)_PROXY that applies to ``url`` (NO_PROXY honoured, as httpx did), found once per loop.

    aiohttp's own ``trust_env`` re-reads the environment and netrc in a thread on every request, which
    costs more CPU than the request itself; one base URL needs one look-up.
    """
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not proxy.startswith(("http://", "https://")):
        return None
    return None if urllib.request.proxy_bypass(parts.hostname or "") else proxy


def _no_answer(exc: BaseException, url: str, timeout: float) -> ModelError:
    """A retryable failure that got no HTTP answer, worded so the user knows what to check."""
    kind = redact_url(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, asyncio.TimeoutError):  # also aiohttp's ServerTimeoutError, ConnectionTimeoutError
        return ModelError(f"model call to {url} timed out after {timeout:g}s", hint="the server is overloaded "
                          "or the generation is long: raise the timeout or lower the concurrency")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return ModelError(f"the model server at {url} closed the connection before answering",
                          hint="it may have crashed, restarted or hit a limit: check the model server's logs")
    if isinstance(exc, aiohttp.ClientConnectionError):
        return ModelError(f"cannot reach the model at {url}: {kind}",
                          hint="check that the model server is running and base_url's host and port are right")
    return ModelError(f"the model server at {url} sent a broken HTTP response: {kind}",  # bad status, cut body
                      hint="check that base_url points at an OpenAI-compatible server, not another service")


_HINTS = {
    401: "check the API key (OPENAI_API_KEY or an api key file)",
    403: "the API key lacks access to this model or endpoint",
    404: "check that base_url ends with /v1 and the model name is one the server serves",
    413: "the request is too large for the server: shorten the conversation or raise its limits",
    422: "the server rejected a request field: check the model's supported parameters",
}


class OpenAIBackend:
    """``ModelBackend`` over HTTP. ``extra_body`` is merged over every request (as in the OpenAI SDK),
    ``model`` (when set) replaces the request's model so clients may send any name.

    The aiohttp session is opened lazily by the first call, inside the running event loop, so a
    backend may be built outside any loop. From then on it belongs to that loop: calling it from
    another loop raises ``ConfigError`` until ``aclose()`` (awaited in the old loop) lets the next
    call open a fresh session. A ``session`` passed in is used as is and never closed here; the
    backend still applies its own timeout and concurrency limit to each call.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_concurrency: int = 64,
        extra_body: dict[str, Any] | None = None,
        session: aiohttp.ClientSession | None = None,
        *,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        retry_after_cap: float = 60.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"model base_url {base_url!r} is not an http(s) URL",
                hint="use e.g. http://127.0.0.1:8000/v1 for vLLM or https://api.openai.com/v1",
            )
        if max_concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ConfigError("OpenAIBackend needs max_concurrency >= 1, max_retries >= 0 and timeout > 0")
        if api_key and urllib.parse.urlsplit(base_url).username is not None:
            # aiohttp sends a URL's credentials as the Authorization header, which the key also needs: every
            # call would raise. Said once, here, instead of as a crash of each call.
            raise ConfigError(
                f"model base_url {redact_url(base_url)} carries credentials (user:password@) and an API key is "
                "set as well: a request can carry only one of them",
                hint="drop the credentials from the URL, or give no API key (unset OPENAI_API_KEY, or point "
                     "--api-key-env at an unset variable)",
            )
        self.base_url = base_url.rstrip("/")
        self._shown_url = redact_url(self.base_url)  # what messages and names may show
        self.model = model
        self.name = model or self._shown_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        self.extra_body = dict(extra_body or {})
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.retry_after_cap = retry_after_cap
        # The key lives only in this header dict; it is never formatted into messages or reprs.
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._owns_session = session is None
        self._session = session
        # Loop-bound state, made by the first call in the loop that will use it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._proxy: str | None = None
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"OpenAIBackend(base_url={self.base_url!r}, model={self.model!r})"

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        """POST ``/chat/completions``. Streaming is answered by the proxy, so upstream never streams."""
        body = self._body(request)
        body.pop("stream", None)
        body.pop("stream_options", None)
        return await self._post("/chat/completions", body)

    async def responses(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST ``/responses`` for upstreams that speak the Responses API natively."""
        body = self._body(request)
        body.pop("stream", None)
        return await self._post("/responses", body)

    async def aclose(self) -> None:
        """Close the session this backend opened (and its connector); a later call opens a new one."""
        session, self._loop, self._semaphore = self._session, None, None
        if self._owns_session and session is not None:
            self._session = None
            await session.close()

    def _open(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        """The session and semaphore for the running loop, made on first use (no await: race-free)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                raise ConfigError(
                    f"OpenAIBackend for {self._shown_url} is bound to another event loop than the one "
                    "calling it",
                    hint="make one backend per event loop, or await backend.aclose() in the old loop "
                    "before using it from a new one",
                )
            self._loop = loop
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
            self._proxy = env_proxy(self.base_url)
            if self._session is None:
                connector = aiohttp.TCPConnector(limit=self.max_concurrency, keepalive_timeout=KEEPALIVE_S)
                self._session = aiohttp.ClientSession(connector=connector, timeout=_NO_TIMER)
        assert self._session is not None and self._semaphore is not None
        return self._session, self._semaphore

    def _body(self, request: dict[str, Any]) -> dict[str, Any]:
        body = {**request, **self.extra_body}
        if self.model:
            body["model"] = self.model
        return body

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter, so synchronized clients do not retry in lockstep."""
        ceiling = min(self.backoff_max, self.backoff_base * (2**attempt))
        return ceiling * (0.5 + 0.5 * self._rng.random())

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        shown = self._shown_url + path
        content = orjson.dumps(body)
        session, semaphore = self._open()
        last: ModelError | None = None
        for attempt in range(self.max_retries + 1):
            delay: float | None = None
            try:
                async with semaphore:
                    with time_limit(self.timeout):
                        status, payload, headers = await self._send(session, url, content)
            except aiohttp.InvalidURL as exc:
                raise ModelError(f"model URL {shown} is not valid: {redact_url(str(exc))}",
                                 hint="fix the model base_url") from exc
            except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
                last = _no_answer(exc, shown, self.timeout)
                if attempt == 0 and isinstance(exc, aiohttp.ServerDisconnectedError):
                    delay = 0.0  # most often a pooled keep-alive connection the server had just closed
            else:
                if status < 300:
                    return self._decode(status, payload, shown)
                detail = _error_detail(payload)
                hint = _HINTS.get(status)
                if 300 <= status < 400 and "Location" in headers:
                    hint = f"the server redirects to {headers['Location']}: use that as base_url"
                last = ModelError(f"model server at {shown} answered HTTP {status}: {detail}",
                                  hint=hint, status=status)
                if status < 500 and status not in RETRY_STATUSES:
                    raise last
                delay = retry_after_seconds(headers.get("Retry-After"), cap=self.retry_after_cap)
            if attempt < self.max_retries:
                await asyncio.sleep(delay if delay is not None else self._backoff(attempt))
        assert last is not None
        if self.max_retries:
            last.message = f"{last.message} (gave up after {self.max_retries + 1} attempts)"
            last.args = (last.message,)
        raise last

    async def _send(self, session: aiohttp.ClientSession, url: str, content: bytes) -> tuple[int, bytes, Any]:
        """One POST and its whole answer: status, body and headers."""
        async with session.post(url, data=content, headers=self._headers, timeout=_NO_TIMER,
                                allow_redirects=False, proxy=self._proxy) as resp:
            return resp.status, await resp.read(), resp.headers

    @staticmethod
    def _decode(status: int, payload: bytes, url: str) -> dict[str, Any]:
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise ModelError(
                f"model server at {url} answered HTTP {status} with a body that is not a "
                f"JSON object: {_snippet(payload.decode('utf-8', 'replace'))!r}",
                hint="base_url may point at a web page or a proxy instead of an OpenAI-compatible API",
                status=status,
            )
        err = data.get("error")
        if err and "choices" not in data and "output" not in data:
            # Some gateways (OpenRouter) report upstream failures inside a 200 body.
            message = err.get("message") if isinstance(err, dict) else err
            code = err.get("code") if isinstance(err, dict) else None
            raise ModelError(f"model server at {url} returned an error: {_snippet(str(message))}",
                             status=code if isinstance(code, int) else 502)
        return data
