"""A backend for models that speak the OpenAI Responses API (``--model responses:http://HOST/v1``): OpenAI,
vLLM's ``/v1/responses``, NeMo Gym model servers.

Palaestra's agents speak Chat Completions, so every call is translated (``palaestra.wire.responses``), with
two exceptions that keep a Responses model's view exact:

- a task read from a NeMo Gym row carries its Responses request (``metadata.nemo_gym_request``); while the
  conversation is that row's input, the request goes upstream as the row has it (every item, tool and
  setting as written, only what the run overrides, such as ``--temperature``, replaced), and later turns
  are appended to that input as Responses items;
- the model's own earlier outputs go back as the output items it sent (reasoning items with their ids
  and encrypted content, function calls with their ids), not as a re-translation of the chat turn.

HTTP (pooling, retries, timeouts, error messages) is ``OpenAIBackend``'s."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from palaestra.models.base import CallContext
from palaestra.models.openai_http import OpenAIBackend
from palaestra.wire import responses

Body = dict[str, Any]
REMEMBERED_ROLLOUTS = 4096  # rollouts whose output items are kept for their next calls (oldest dropped)
_OVERRIDABLE = ("model", "temperature", "top_p", "max_output_tokens", "tools", "tool_choice", "parallel_tool_calls",
                "text", "reasoning", "user")


class ResponsesBackend:
    """A ``ModelBackend`` over ``POST {base_url}/responses``."""

    def __init__(self, base_url: str, **http: Any) -> None:
        self.http = OpenAIBackend(base_url, **http)
        self.name = f"responses:{self.http.name}"
        self._outputs: OrderedDict[str, list[list[Body]]] = OrderedDict()

    def __repr__(self) -> str:
        return f"ResponsesBackend({self.http!r})"

    async def chat(self, request: Body, ctx: CallContext | None = None) -> Body:
        body = self.request_for(request, ctx)
        response = await self.http.responses(body)
        rid = ctx.rollout_id if ctx is not None else None
        if rid:
            self._outputs.setdefault(rid, []).append(list(response.get("output") or []))
            self._outputs.move_to_end(rid)
            while len(self._outputs) > REMEMBERED_ROLLOUTS:
                self._outputs.popitem(last=False)
        return responses.responses_to_chat_completion(response)

    async def aclose(self) -> None:
        await self.http.aclose()

    def request_for(self, request: Body, ctx: CallContext | None) -> Body:
        """The Responses request for one chat request of a rollout (see the module's docstring)."""
        rid = ctx.rollout_id if ctx is not None else None
        messages = list(request.get("messages") or [])
        translated = responses.chat_to_responses_request(request)
        task = ctx.task if ctx is not None else None
        original = task.metadata.get("nemo_gym_request") if task is not None else None
        prompt = task.messages() if task is not None else []
        if isinstance(original, dict) and messages[:len(prompt)] == prompt:
            body = dict(original)
            start, base = len(prompt), original.get("input")
            base_items: list[Body] = [{"role": "user", "content": base}] if isinstance(base, str) else list(base or [])
        else:
            body, start, base_items = dict(translated), 0, []
        rest = messages[start:]
        if rest or not base_items:
            body["input"] = base_items + self._items(rest, rid)
        if isinstance(original, dict) and body is not translated:
            own = responses.chat_to_responses_request({**responses.responses_to_chat(original), "messages": []})
            for key in _OVERRIDABLE:  # what the run set differently from the row (a flag, the tools offered)
                if key in translated and translated[key] != own.get(key):
                    body[key] = translated[key]
        return body

    def _items(self, messages: list[Body], rollout_id: str | None) -> list[Body]:
        """Chat messages as input items; the n-th assistant turn is the n-th response's own output."""
        outputs = self._outputs.get(rollout_id, []) if rollout_id else []
        items: list[Body] = []
        turn = 0
        for m in messages:
            if m.get("role") == "assistant" and turn < len(outputs):
                items.extend(_as_input(outputs[turn]))
                turn += 1
            else:
                turn += m.get("role") == "assistant"
                items.extend(responses.chat_messages_to_responses_input([m]))
        return items


def _as_input(output: list[Body]) -> list[Body]:
    """A response's output items as input items (``status`` is output-only for some servers)."""
    return [{k: v for k, v in item.items() if k != "status"} for item in output if isinstance(item, dict)]


def responses_backend(spec: Any, **settings: Any) -> ResponsesBackend:
    """``responses:http(s)://HOST/v1``: the model-plugin factory of this kind."""
    from palaestra.core.errors import ConfigError
    from palaestra.models.openai_http import api_key_from_env

    url = str(spec.name)
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"model '{spec.text}': '{url}' is not an http(s) URL",
                          hint="use responses:http://HOST:PORT/v1 (a server answering POST /v1/responses)")
    return ResponsesBackend(url, model=settings.get("model_name"), timeout=settings.get("timeout_s", 120.0),
                            max_concurrency=settings.get("max_concurrency", 256),
                            api_key=api_key_from_env(settings.get("api_key_env", "OPENAI_API_KEY"),
                                                     settings.get("api_key_file")))
