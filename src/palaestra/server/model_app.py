"""The model proxy's HTTP face: OpenAI chat and Responses, Anthropic Messages, optionally per rollout.

Plain Starlette routes keep per-request overhead low. Streaming clients (Codex, Claude Code) get
server-sent events replayed from the full response: the backend contract is non-streaming, and a
prebuilt event body costs less than a live stream while looking the same to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from palaestra.core.errors import ModelError
from palaestra.wire.errors import error_detail
from palaestra.wire.requests import InvalidRequest
from palaestra.wire.translate import TranslationError

if TYPE_CHECKING:
    from palaestra.server.model_proxy import Api, ModelProxy

log = logging.getLogger(__name__)
Body = dict[str, Any]


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _error(kind: str, message: str, status: int, hint: str | None = None, api: str = "chat",
           param: str | None = None, code: str | None = None) -> Response:
    # ``type``: what OpenAI and Anthropic clients read; a malformed request is what both call it
    err = error_detail(kind, message, hint, type="invalid_request_error" if kind == "bad_request" else kind)
    if api != "messages" and kind == "bad_request":
        err.update(param=param, code=code)  # OpenAI's error object always carries both
    body: Body = {"type": "error", "error": err} if api == "messages" else {"error": err}
    return _json(body, status)


def _sse(events: Iterator[tuple[str | None, Any]]) -> Response:
    chunks = []
    for name, data in events:
        payload = data if isinstance(data, bytes) else orjson.dumps(data)
        chunks.append((b"event: " + name.encode() + b"\n" if name else b"") + b"data: " + payload + b"\n\n")
    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return Response(b"".join(chunks), media_type="text/event-stream", headers=headers)


# ---- stream builders ----------------------------------------------------------------------------
def chat_stream(resp: Body, request: Body) -> Iterator[tuple[str | None, Any]]:
    """Chat completion chunks per choice (``n`` of them): role+content (with its logprobs), then tool calls,
    then the finish reason; usage last."""
    head = {"id": resp.get("id", ""), "object": "chat.completion.chunk", "created": resp.get("created", 0),
            "model": resp.get("model", "")}
    for index, choice in enumerate(resp.get("choices") or [{}]):
        message = choice.get("message") or {}

        def chunk(delta: Body, finish: str | None = None, logprobs: Any = None, index: int = index) -> Body:
            return {**head, "choices": [{"index": index, "delta": delta, "finish_reason": finish,
                                         "logprobs": logprobs}]}

        delta: Body = {"role": "assistant", "content": message.get("content") or ""}
        for extra in ("reasoning_content", "reasoning"):
            if message.get(extra):
                delta[extra] = message[extra]
        yield None, chunk(delta, logprobs=choice.get("logprobs"))
        calls = message.get("tool_calls") or []
        if calls:
            yield None, chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
        yield None, chunk({}, choice.get("finish_reason") or "stop")
    if (request.get("stream_options") or {}).get("include_usage"):
        yield None, {**head, "choices": [], "usage": resp.get("usage")}
    yield None, b"[DONE]"


def responses_stream(resp: Body) -> Iterator[tuple[str | None, Any]]:
    """Responses API events: created, per-item added/deltas/done, completed."""
    seq = iter(range(1 << 30))

    def ev(kind: str, **fields: Any) -> tuple[str, Body]:
        return kind, {"type": kind, "sequence_number": next(seq), **fields}

    yield ev("response.created", response={**resp, "status": "in_progress", "output": [], "usage": None})
    yield ev("response.in_progress", response={**resp, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(resp.get("output") or []):
        kind, item_id = item.get("type"), item.get("id", "")
        if kind == "message":
            yield ev("response.output_item.added", output_index=i,
                     item={**item, "status": "in_progress", "content": []})
            for j, part in enumerate(item.get("content") or []):
                text = part.get("text", "")
                where = {"item_id": item_id, "output_index": i, "content_index": j}
                yield ev("response.content_part.added", **where, part={**part, "text": ""})
                yield ev("response.output_text.delta", **where, delta=text, logprobs=[])
                yield ev("response.output_text.done", **where, text=text, logprobs=[])
                yield ev("response.content_part.done", **where, part=part)
        elif kind == "function_call":
            yield ev("response.output_item.added", output_index=i,
                     item={**item, "status": "in_progress", "arguments": ""})
            yield ev("response.function_call_arguments.delta", item_id=item_id, output_index=i,
                     delta=item.get("arguments", ""))
            yield ev("response.function_call_arguments.done", item_id=item_id, output_index=i,
                     arguments=item.get("arguments", ""), name=item.get("name", ""))
        else:
            yield ev("response.output_item.added", output_index=i, item=item)
        yield ev("response.output_item.done", output_index=i, item=item)
    final = "response.incomplete" if resp.get("status") == "incomplete" else "response.completed"
    yield ev(final, response=resp)


def messages_stream(msg: Body) -> Iterator[tuple[str | None, Any]]:
    """Anthropic events: message_start, per block start/delta/stop, message_delta, message_stop."""
    usage = msg.get("usage") or {}
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0}}
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(msg.get("content") or []):
        if block.get("type") == "tool_use":
            opened: Body = {**block, "input": {}}
            args = orjson.dumps(block.get("input", {})).decode()
            delta: Body = {"type": "input_json_delta", "partial_json": args}
        else:
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}
        yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    stop = {"stop_reason": msg.get("stop_reason"), "stop_sequence": msg.get("stop_sequence")}
    yield "message_delta", {"type": "message_delta", "delta": stop,
                            "usage": {"output_tokens": usage.get("output_tokens", 0)}}
    yield "message_stop", {"type": "message_stop"}


def _reply(api: Api, result: Body, request: Body) -> Response:
    if not request.get("stream"):
        return _json(result)
    if api == "chat":
        return _sse(chat_stream(result, request))
    if api == "responses":
        return _sse(responses_stream(result))
    return _sse(messages_stream(result))


# ---- routes -------------------------------------------------------------------------------------
def create_model_app(proxy: ModelProxy) -> Starlette:
    """The proxy as an ASGI app; every POST route also exists under ``/rollouts/{rollout_id}``."""

    def endpoint(api: Api) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            raw = await request.body()
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                return _error("bad_request", f"request body is not valid JSON ({exc}); send a JSON object "
                              "with Content-Type: application/json", 400, api=api)
            if not isinstance(body, dict):
                return _error("bad_request", f"request body must be a JSON object, got {type(body).__name__}",
                              400, api=api)
            rollout_id = request.path_params.get("rollout_id")
            try:
                result = await proxy.complete(rollout_id, api, body)
            except InvalidRequest as exc:
                return _error("bad_request", str(exc), 400, api=api, param=exc.param, code=exc.code)
            except TranslationError as exc:
                return _error("bad_request", str(exc), 400, api=api)
            except ModelError as exc:
                status = exc.status if exc.status and 400 <= exc.status < 500 else 502
                return _error(exc.kind, exc.message, status, exc.hint, api=api)
            except Exception as exc:  # a bug: answer a clean error, keep the traceback in the log
                log.exception("model proxy failed on %s", request.url.path)
                return _error("internal", f"model proxy error: {type(exc).__name__}: {exc}", 500, api=api)
            try:
                return _reply(api, result, body)
            except Exception as exc:  # e.g. an integer beyond 64 bits in a chat response passed through
                log.warning("model proxy cannot send the answer on %s: %s: %s", request.url.path,
                            type(exc).__name__, exc)
                return _error("model", f"the model backend's response cannot be sent as JSON "
                              f"({type(exc).__name__}: {exc})"[:2000], 502,
                              "the backend answered a value JSON clients cannot read (e.g. an integer "
                              "beyond 64 bits); fix or update the backend", api=api)

        return handle

    async def models(request: Request) -> Response:
        # a backend's ``model`` is its model's name, or (a rollout's endpoint for a CLI) the ChatModel itself
        names = [getattr(proxy.backend, attr, None) for attr in ("model", "name")]
        name = next((n for n in names if isinstance(n, str) and n), "palaestra")
        return _json({"object": "list", "data": [{"id": name, "object": "model", "created": 0,
                                                  "owned_by": "palaestra"}]})

    async def healthz(request: Request) -> Response:
        return _json({"status": "ok", "backend": getattr(proxy.backend, "name", "")})

    async def count_tokens(request: Request) -> Response:
        """Claude Code asks for token counts; a chars/4 estimate keeps it going without a tokenizer."""
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _error("bad_request", f"request body is not valid JSON ({exc})", 400, api="messages")
        if not isinstance(body, dict):
            return _error("bad_request", "request body must be a JSON object", 400, api="messages")
        size = len(orjson.dumps({k: body.get(k) for k in ("system", "messages", "tools")}))
        return _json({"input_tokens": size // 4})

    routes: list[Route] = [Route("/healthz", healthz, methods=["GET"])]
    for prefix in ("", "/rollouts/{rollout_id}"):
        routes += [
            Route(prefix + "/v1/chat/completions", endpoint("chat"), methods=["POST"]),
            Route(prefix + "/v1/responses", endpoint("responses"), methods=["POST"]),
            Route(prefix + "/v1/messages", endpoint("messages"), methods=["POST"]),
            Route(prefix + "/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route(prefix + "/v1/models", models, methods=["GET"]),
        ]

    async def no_route(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        hint = ("the proxy serves POST /v1/chat/completions, /v1/responses, /v1/messages and GET /v1/models, "
                "each optionally under /rollouts/{rollout_id}")
        return _error("not_found" if status == 404 else "method_not_allowed",
                      f"no route for {request.method} {request.url.path}", status, hint)

    app = Starlette(routes=routes, exception_handlers={404: no_route, 405: no_route})
    app.state.proxy = proxy
    return app


__all__ = ["chat_stream", "create_model_app", "messages_stream", "responses_stream"]
