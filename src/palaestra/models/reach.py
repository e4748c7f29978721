"""Whether a run's model servers can be reached at all, asked once before the first rollout.

A model server that is down when a run starts is known then: each rollout would try it, retry with
backoff, and be journaled ``failed(model)`` in turn, so a dead server burned through a whole dataset
(2,000 rows at concurrency 64 took four minutes; 65,000 would take hours) before the run said what was
wrong. One TCP connection per distinct host and port tells instead, in milliseconds, and the run is
refused before anything is written. Only a definite answer refuses (the connection refused, the host
unknown or unroutable); a connection that neither opens nor fails within the wait is left to the
rollouts, whose timeouts and retries are made for slow networks. Behind an HTTP(S) proxy the server is
not the first hop, so nothing is asked. A server that dies during a run still fails its rollouts
``failed(model)``, never scored."""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.parse
from collections.abc import Iterable

from palaestra.models.openai_http import env_proxy

__all__ = ["unreachable"]

WAIT_S = 3.0


def _address(url: str) -> tuple[str, int] | None:
    """The host and port a request to ``url`` connects to first; None when that is a proxy, or unknown."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or env_proxy(url):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: the backend names that itself
        return None
    return parts.hostname, port


async def _why_not(host: str, port: int, wait_s: float) -> str | None:
    """Why no connection to ``host:port`` opens; None when one does, or when the wait ends undecided."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), wait_s)
    except asyncio.TimeoutError:
        return None
    except socket.gaierror as exc:  # the name does not resolve
        return f"host not found: {exc.strerror}"
    except OSError as exc:  # refused, network or host unreachable (asyncio words it "Connect call failed")
        return os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return None


async def unreachable(urls: Iterable[str], wait_s: float = WAIT_S) -> dict[str, str]:
    """Of the base URLs ``urls``, those no connection reaches, each with why (``Connection refused``).
    Each host and port is asked once, all at once. The URLs are returned as given: redact them
    (``core.secrets.redact_url``) before showing them."""
    by_address: dict[tuple[str, int], list[str]] = {}
    for url in dict.fromkeys(urls):
        address = _address(url)
        if address is not None:
            by_address.setdefault(address, []).append(url)
    addresses = list(by_address)
    reasons = await asyncio.gather(*(_why_not(host, port, wait_s) for host, port in addresses))
    return {url: why for address, why in zip(addresses, reasons, strict=True) if why for url in by_address[address]}
