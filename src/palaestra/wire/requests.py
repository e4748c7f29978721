"""Requests the upstream APIs refuse, refused here the same way, before any backend sees them.

A harness written against OpenAI or Anthropic learns of a malformed request from a 400 that names the
field; a proxy that accepted it would hand the backend something the real API never would (an empty
conversation, an unbounded answer) and hide the harness's bug. The messages follow the upstream wording so
a client's error handling reads them as it reads the real ones. Pure checks, no I/O."""

from __future__ import annotations

from typing import Any

from palaestra.wire.translate import TranslationError

Body = dict[str, Any]
MAX_N = 128  # OpenAI's bound on chat ``n``
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on ``top_logprobs``


class InvalidRequest(TranslationError):
    """A request the upstream API answers 400 ``invalid_request_error``; ``param`` names the field.

    Also raised by a backend asked for what it cannot honour (``code="unsupported_parameter"``), so a
    parameter is refused by name rather than silently ignored."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_chat(body: Body) -> None:
    """Chat Completions: ``messages`` a non-empty array, ``n`` within [1, 128], ``top_logprobs`` only with
    ``logprobs`` and within [0, 20] (OpenAI's own rules and messages)."""
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("Missing required parameter: 'messages'.", param="messages",
                             code="missing_required_parameter")
    if not isinstance(messages, list):
        raise InvalidRequest(f"Invalid type for 'messages': expected an array, but got {type(messages).__name__} "
                             "instead.", param="messages", code="invalid_type")
    if not messages:
        raise InvalidRequest("Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
                             "an empty array instead.", param="messages", code="empty_array")
    n = body.get("n")
    if n is not None and (not _is_int(n) or not 1 <= n <= MAX_N):
        raise InvalidRequest(f"Invalid 'n': expected an integer within [1, {MAX_N}], got {n!r}.", param="n",
                             code="invalid_value")
    top = body.get("top_logprobs")
    if top is not None:
        if not _is_int(top) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise InvalidRequest(f"Invalid 'top_logprobs': expected an integer within [0, {MAX_TOP_LOGPROBS}], "
                                 f"got {top!r}.", param="top_logprobs", code="invalid_value")
        if top and not body.get("logprobs"):
            raise InvalidRequest("Invalid value for 'top_logprobs': 'logprobs' must be set to true when "
                                 "'top_logprobs' is used.", param="top_logprobs", code="invalid_value")


def check_responses(body: Body) -> None:
    """Responses API: it has no ``n`` and no ``logprobs`` switch (OpenAI answers "Unknown parameter")."""
    for key in ("n", "logprobs"):
        if key in body:
            raise InvalidRequest(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
    top = body.get("top_logprobs")
    if top is not None and (not _is_int(top) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise InvalidRequest(f"Invalid 'top_logprobs': expected an integer within [0, {MAX_TOP_LOGPROBS}], "
                             f"got {top!r}.", param="top_logprobs", code="invalid_value")


def check_messages(body: Body) -> None:
    """Anthropic Messages: ``max_tokens`` is required (a positive integer), ``messages`` a non-empty list."""
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("messages: Field required", param="messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Input should be a valid list", param="messages")
    if not messages:
        raise InvalidRequest("messages: at least one message is required", param="messages")
    if "max_tokens" not in body:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    max_tokens = body["max_tokens"]
    if not _is_int(max_tokens) or max_tokens < 1:
        raise InvalidRequest(f"max_tokens: Input should be an integer greater than or equal to 1, got "
                             f"{max_tokens!r}", param="max_tokens")


def refuse(backend: str, param: str, why: str) -> InvalidRequest:
    """The error a backend raises for a parameter it cannot honour: 400 naming the parameter."""
    return InvalidRequest(f"the {backend} backend cannot honour '{param}': {why}", param=param,
                          code="unsupported_parameter")


__all__ = ["InvalidRequest", "check_chat", "check_messages", "check_responses", "refuse"]
