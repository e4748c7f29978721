"""The model proxy: one front for any backend that speaks three dialects and records every call.

Agents and CLI harnesses talk to the proxy instead of the model, so every call of a rollout (request,
response, latency, usage, token ids and logprobs) is captured in one place, whatever the harness.
A rollout is named by the ``/rollouts/{rollout_id}`` URL prefix, which needs no cooperation from
the harness beyond a base URL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Literal

from palaestra.core.errors import ModelError
from palaestra.core.records import ModelCallRecord
from palaestra.models.base import CallContext, ModelBackend
from palaestra.server.response_store import ResponseStore, input_items
from palaestra.wire import anthropic, responses, translate
from palaestra.wire.requests import check_chat, check_messages, check_responses

log = logging.getLogger(__name__)

Api = Literal["chat", "responses", "messages"]
APIS: tuple[Api, ...] = ("chat", "responses", "messages")

__all__ = ["APIS", "Api", "ModelProxy", "token_fields"]


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        return value
    return None


def token_fields(response: dict[str, Any]) -> tuple[list[int] | None, list[int] | None, list[float] | None]:
    """Prompt ids, generated ids and per-token logprobs, from the fields vLLM adds to a chat response
    (``prompt_token_ids``; ``choices[0].token_ids``; ``choices[0].logprobs.content[i].logprob``)."""
    prompt_ids = _int_list(response.get("prompt_token_ids"))
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    gen_ids = _int_list(choice.get("token_ids"))
    logprobs = None
    logprob_block = choice.get("logprobs")
    content = logprob_block.get("content") if isinstance(logprob_block, dict) else None
    if isinstance(content, list):
        values = [c.get("logprob") for c in content if isinstance(c, dict)]
        if values and all(isinstance(v, (int, float)) for v in values):
            logprobs = [float(v) for v in values if v is not None]
        if gen_ids is None:  # vLLM's return_tokens_as_token_ids spells each token "token_id:123"
            tokens = [str(c.get("token")) for c in content if isinstance(c, dict)]
            if tokens and all(t.startswith("token_id:") and t[9:].isdigit() for t in tokens):
                gen_ids = [int(t[9:]) for t in tokens]
    return prompt_ids, gen_ids, logprobs


def capture_status(gen_ids: list[int] | None, logprobs: list[float] | None) -> str:
    if gen_ids is not None and logprobs is not None:
        return "ids+logprobs"
    return "ids" if gen_ids is not None else ("logprobs" if logprobs is not None else "none")


def _int_usage(response: dict[str, Any]) -> dict[str, int]:
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return {}
    # A backend's token counts are data, not trusted: the ones translate.token_count finds implausible
    # (negative, fractional, not numbers, beyond 2**53) are dropped, as the dialect translators zero them.
    return {k: n for k, v in usage.items() if (n := translate.token_count(v)) is not None}


def _responses_logprobs(body: dict[str, Any]) -> dict[str, Any]:
    """The chat fields asking for what a Responses request asks for: ``include`` naming
    ``message.output_text.logprobs`` or a positive ``top_logprobs``."""
    top = body.get("top_logprobs")
    top = top if isinstance(top, int) and not isinstance(top, bool) else 0
    include = body.get("include")
    wanted = top > 0 or (isinstance(include, list) and "message.output_text.logprobs" in include)
    return {"logprobs": True, "top_logprobs": top} if wanted else {}


def _attach_logprobs(result: dict[str, Any], chat: dict[str, Any]) -> None:
    """The chat answer's per-token logprobs on the Responses output text (the same token entries)."""
    choices = chat.get("choices")
    block = choices[0].get("logprobs") if isinstance(choices, list) and choices and isinstance(
        choices[0], dict) else None
    content = block.get("content") if isinstance(block, dict) else None
    if not isinstance(content, list):
        return
    for item in result.get("output") or []:
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    part["logprobs"] = content
                    return


class ModelProxy:
    """Translate, call the backend, translate back, and keep a record per rollout until popped.

    Calls for a rollout that was never registered are still recorded (a harness may only know the
    URL), but at most ``max_unregistered`` such rollouts are kept, oldest dropped first, so a
    long-lived server cannot grow without bound. Responses API answers are kept (at most
    ``max_stored_responses``, unless the request says ``store: false``) to back ``previous_response_id``.
    """

    def __init__(self, backend: ModelBackend, *, max_unregistered: int = 1024,
                 max_stored_responses: int = 1024) -> None:
        self.backend = backend
        self.max_unregistered = max_unregistered
        self.stored = ResponseStore(max_stored_responses)
        self._contexts: dict[str, CallContext] = {}
        self._calls: OrderedDict[str, list[ModelCallRecord]] = OrderedDict()
        self._lock = threading.Lock()  # the app may run in a server thread while a runner pops calls

    def register(self, rollout_id: str, ctx: CallContext | None = None) -> None:
        ctx = ctx or CallContext()
        if ctx.rollout_id is None:
            ctx.rollout_id = rollout_id
        with self._lock:
            self._contexts[rollout_id] = ctx
            self._calls.setdefault(rollout_id, [])

    def unregister(self, rollout_id: str) -> None:
        with self._lock:
            self._contexts.pop(rollout_id, None)
            self._calls.pop(rollout_id, None)

    def pop_calls(self, rollout_id: str) -> list[ModelCallRecord]:
        """The calls recorded for a rollout since the last pop; the proxy forgets them."""
        with self._lock:
            calls = self._calls.pop(rollout_id, [])
            if rollout_id in self._contexts:
                self._calls[rollout_id] = []
        return calls

    def release(self, rollout_id: str) -> list[ModelCallRecord]:
        """The calls of a rollout that has ended, and the proxy forgets the rollout (``unregister``): a run
        of any length holds a context only for the rollouts in flight."""
        with self._lock:
            self._contexts.pop(rollout_id, None)
            return self._calls.pop(rollout_id, [])

    def context(self, rollout_id: str | None) -> CallContext:
        if rollout_id is None:
            return CallContext()
        with self._lock:
            return self._contexts.get(rollout_id) or CallContext(rollout_id=rollout_id)

    async def complete(self, rollout_id: str | None, api: Api, body: dict[str, Any]) -> dict[str, Any]:
        """Answer ``body`` (in the ``api`` dialect) and record the call under ``rollout_id``.

        The record holds the chat request the backend saw and the chat response it gave, because
        that is what the model actually consumed and produced (what a trainer needs); ``api`` names
        the dialect the client spoke. Translation errors raise ``TranslationError`` (a bad request);
        backend failures are recorded, then raised as ``ModelError``.
        """
        request = body
        if api == "chat":
            check_chat(body)
            chat_request = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        elif api == "responses":
            check_responses(body)
            body = self.stored.resolve(body)
            chat_request = responses.responses_to_chat(body)
            chat_request.update(_responses_logprobs(body))
        elif api == "messages":
            check_messages(body)
            chat_request = anthropic.messages_to_chat(body)
        else:
            raise ValueError(f"unknown api {api!r}: use one of {APIS}")
        ctx = self.context(rollout_id)
        started = time.time()
        t0 = time.perf_counter()
        try:
            response = await self.backend.chat(chat_request, ctx)
        except translate.TranslationError:  # the backend refused a parameter by name: the client's 400
            raise
        except ModelError as exc:
            self._record(rollout_id, ModelCallRecord(
                api=api, request=chat_request, error=exc.to_dict(), status=exc.status or 502,
                started=started, latency_s=time.perf_counter() - t0))
            raise
        except Exception as exc:
            log.exception("model backend %s crashed", getattr(self.backend, "name", "?"))
            error = ModelError(
                f"model backend {getattr(self.backend, 'name', '?')!r} crashed: {type(exc).__name__}: {exc}",
                hint="this is a bug in the backend; see the server log for the traceback",
            )
            self._record(rollout_id, ModelCallRecord(
                api=api, request=chat_request, error=error.to_dict(), status=500,
                started=started, latency_s=time.perf_counter() - t0))
            raise error from exc
        latency = time.perf_counter() - t0
        if not isinstance(response, dict):
            raise ModelError(f"model backend returned {type(response).__name__}, not a chat completion dict")
        prompt_ids, gen_ids, logprobs = token_fields(response)
        self._record(rollout_id, ModelCallRecord(
            api=api, request=chat_request, response=response, status=200, started=started, latency_s=latency,
            usage=_int_usage(response), prompt_token_ids=prompt_ids, generation_token_ids=gen_ids,
            generation_logprobs=logprobs, token_capture=capture_status(gen_ids, logprobs),
            routed_to=routed if isinstance(routed := response.get("palaestra_routed_to"), str) else None))
        if api == "responses":
            result = responses.chat_to_responses(response, body)
            result["previous_response_id"] = request.get("previous_response_id")
            if "logprobs" in chat_request:
                _attach_logprobs(result, response)
            if request.get("store") is not False:
                self.stored.remember(str(result["id"]), [*input_items(body), *result["output"]])
            return result
        if api == "messages":
            return anthropic.chat_to_messages(response, body)
        return response

    def _record(self, rollout_id: str | None, record: ModelCallRecord) -> None:
        if rollout_id is None:
            return
        with self._lock:
            calls = self._calls.get(rollout_id)
            if calls is None:
                calls = self._calls[rollout_id] = []
                self._evict()
            calls.append(record)

    def _evict(self) -> None:
        unregistered = [rid for rid in self._calls if rid not in self._contexts]
        for rid in unregistered[: max(0, len(unregistered) - self.max_unregistered)]:
            del self._calls[rid]
