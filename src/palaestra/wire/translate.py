"""Chat Completions as the pivot of every dialect translation: the pieces both dialects share.

Backends speak one dialect (chat), so each implements one method, while CLI harnesses (Codex speaks
Responses, Claude Code speaks Messages) run unmodified against any backend. The dialects live beside this
module (``responses.py``: the OpenAI Responses API, ``anthropic.py``: the Anthropic Messages API); here is
what they share: the error a malformed body raises, the guard that turns any slip into it, and the reading
of chat content, choices and token counts. No I/O, no mutation."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson

Body = dict[str, Any]

def _typed(fn: Callable[..., Body]) -> Callable[..., Body]:
    """A malformed body (a field of the wrong type anywhere) is the client's error: TranslationError
    (answered 400 naming it), never an AttributeError deep inside (answered 500)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Body:
        try:
            return fn(*args, **kwargs)
        except TranslationError:
            raise
        except Exception as exc:  # pure data shuffling: any failure means a malformed body
            raise TranslationError(f"{fn.__name__}: malformed body ({type(exc).__name__}: {exc})") from None

    return wrapper


class TranslationError(ValueError):
    """The request does not have the shape its API requires; the proxy answers it with HTTP 400."""


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _text_of(content: Any) -> str:
    """Text of a content value given as a string or a list of text-ish parts/blocks."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else _dumps(content)


def _pass(src: Body, dst: Body, *keys: str) -> None:
    dst.update({key: src[key] for key in keys if src.get(key) is not None})



def _choice(chat: Body) -> tuple[Body, str | None]:
    first = (chat.get("choices") or [{}])[0]
    return first.get("message") or {}, first.get("finish_reason")


MAX_TOKEN_COUNT = 2**53 - 1


def token_count(value: Any) -> int | None:
    """A backend's token count, or None where it is not a plausible one.

    A count is data the backend sent, not something to trust: only a whole, non-negative JSON number up
    to ``MAX_TOKEN_COUNT`` is kept (an integral float such as ``12.0`` counts as 12). Anything else (a
    string, a bool, NaN, a negative or fractional number, ``1e30``, ``2**64 - 1``) is unknown.

    Why unknown rather than clamped or rejected: the count is bookkeeping beside an answer that is fine,
    so failing the call would throw a good completion away over a number the harness only displays; a
    clamped count would be a made-up figure that looks real in reports and training data, whereas an
    unknown one reads as 0, exactly as a missing count already does. Why ``2**53``: every kept count is
    exact in any JSON reader (JavaScript harnesses such as Claude Code hold numbers as doubles) and any
    sum of counts stays far inside the 64-bit range orjson can write, so the proxy always answers a valid
    body instead of failing to encode it (a plain HTTP 500)."""
    if type(value) is int:  # the usual count (not a bool: its type is bool), told apart by type alone
        return value if 0 <= value <= MAX_TOKEN_COUNT else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if not value.is_integer():  # NaN and the infinities are not integers either
            return None
        value = int(value)
    return value if 0 <= value <= MAX_TOKEN_COUNT else None


def _usage(chat: Body) -> tuple[int, int]:
    """Prompt and completion token counts of a chat response; an implausible or missing one is 0 (see
    ``token_count``), and a ``usage`` that is not an object is no usage."""
    usage = chat.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    return token_count(usage.get("prompt_tokens")) or 0, token_count(usage.get("completion_tokens")) or 0



def _loads_object(text: str) -> Body | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
