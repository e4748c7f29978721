"""Small helpers shared by Palaestra's ASGI apps: fast JSON responses and JSON errors (never a stack)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from palaestra.core.errors import PalaestraError
from palaestra.wire.errors import error_body, exception_body


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, default=_default)


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def error_response(kind: str, message: str, status: int, hint: str | None = None) -> JSON:
    """The error envelope (built by ``wire.errors``) as a response."""
    return JSON(error_body(kind, message, hint), status_code=status)


def from_exception(exc: PalaestraError, status: int) -> JSON:
    return JSON(exception_body(exc), status_code=status)


async def read_json(request: Request, what: str) -> Any:
    """Parse a request body; a body that is not JSON raises a PalaestraError naming the endpoint."""
    body = await request.body()
    if not body:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PalaestraError(
            f"{what}: request body is not valid JSON ({exc})",
            kind="bad_request",
            hint="send a JSON object with content-type application/json",
        ) from None
