"""Scripted policies: real backends with fixed behaviour, for tests and overhead benchmarks.

They answer complete Chat Completions bodies, so every layer above (proxy, translation, agents,
journal) runs exactly as with a real model. ``oracle`` plays back an environment's reference, which
proves a verifier can award full reward; ``null`` proves it awards none. They are never presented
as models.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from palaestra.core.errors import ConfigError, ModelError
from palaestra.core.records import Message, Reference
from palaestra.models.base import CallContext
from palaestra.models.schema_instance import instance, requested_schema
from palaestra.wire.requests import refuse

POLICIES = ("oracle", "constant", "echo", "replay", "null", "format")


def content_text(content: Any) -> str:
    """Message content as plain text: a string stays, text parts are joined, anything else is empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _key(content: Any) -> str:
    return hashlib.sha256(content_text(content).encode("utf-8")).hexdigest()


def reference_key(messages: list[Message]) -> str:
    """Key of a conversation in a ``references`` dict: sha256 of the first user message's text.

    Hashing the prompt lets a standalone server (started with an env's bundled tasks) find the
    reference for a request that carries no rollout context.
    """
    for message in messages:
        if message.get("role") == "user":
            return _key(message.get("content"))
    return _key("")


def _call_turns(messages: list[Message]) -> int:
    """How many assistant turns of a conversation made tool calls."""
    return sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))


def _tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def _normalize_replayed(message: Mapping[str, Any], turn: int) -> dict[str, Any]:
    """Accept recorded assistant messages in OpenAI form or as ``{"name", "arguments"}`` calls."""
    calls = []
    for j, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function", call)
        calls.append(_tool_call(call.get("id") or f"call_replay_{turn}_{j}", fn["name"], fn.get("arguments")))
    content = message.get("content") or ("" if not calls else None)
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    return out


class ScriptedBackend:
    """A fixed policy behind the ``ModelBackend`` contract.

    ``failure_rate`` draws from a ``random.Random(seed)``, so the same seed fails the same calls;
    ``latency_ms`` sleeps without blocking the loop, to model a slow upstream in benchmarks.
    """

    def __init__(
        self,
        policy: str,
        *,
        latency_ms: float = 0.0,
        failure_rate: float = 0.0,
        seed: int = 0,
        constant_text: str = "\\boxed{A}",
        replay: Sequence[Mapping[str, Any]] | None = None,
        references: Mapping[str, Reference | Mapping[str, Any]] | None = None,
        accuracy: float = 1.0,
    ) -> None:
        if policy not in POLICIES:
            raise ConfigError(
                f"unknown scripted policy {policy!r}", hint=f"choose one of: {', '.join(POLICIES)}"
            )
        if not 0.0 <= failure_rate <= 1.0:
            raise ConfigError(f"failure_rate must be within [0, 1], got {failure_rate}")
        if not 0.0 <= accuracy <= 1.0:
            raise ConfigError(f"accuracy must be within [0, 1], got {accuracy}")
        if latency_ms < 0:
            raise ConfigError(f"latency_ms must be >= 0, got {latency_ms}")
        if policy == "replay" and not replay:
            raise ConfigError(
                "the replay policy needs a non-empty list of recorded assistant messages",
                hint="pass replay=[{'content': ...}, {'tool_calls': [...]}, ...]",
            )
        self.policy = policy
        self.name = f"scripted-{policy}"
        self.latency_ms = latency_ms
        self.failure_rate = failure_rate
        self.seed = seed
        self.constant_text = constant_text
        self.accuracy = accuracy
        self.replay = [_normalize_replayed(m, i) for i, m in enumerate(replay or [])]
        self.references: dict[str, Reference] = {
            k: v if isinstance(v, Reference) else Reference.model_validate(v)
            for k, v in (references or {}).items()
        }
        self._rng = random.Random(seed)
        self._ids = itertools.count()

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        ctx = ctx or CallContext()
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000.0)
        if self.failure_rate and self._rng.random() < self.failure_rate:
            raise ModelError(
                f"scripted failure (policy {self.policy!r}, failure_rate={self.failure_rate})", status=500
            )
        # A token-capture request (vLLM's ``return_token_ids`` beside logprobs) asks for tokens where the
        # backend has them and records what came (``token_capture: none``); a plain logprobs request
        # expects them, so it is refused by name rather than answered without.
        if (request.get("logprobs") or request.get("top_logprobs")) and not request.get("return_token_ids"):
            key = "logprobs" if request.get("logprobs") else "top_logprobs"
            raise refuse(self.name, key, "a scripted policy has no token distribution; use a local or "
                         "remote model for logprobs")
        messages: list[Message] = request.get("messages") or []
        if self.policy == "format":  # the one policy that reads the request's settings, not its messages
            message = self._policy_format(request)
        else:
            message = getattr(self, f"_policy_{self.policy}")(messages, ctx)
        n = request.get("n")
        return self._response(request, messages, message, n if isinstance(n, int) and n > 1 else 1)

    async def aclose(self) -> None:
        return None

    # ---- policies ----------------------------------------------------------------------------
    def _policy_oracle(self, messages: list[Message], ctx: CallContext) -> dict[str, Any]:
        reference = ctx.reference or self._lookup(messages, ctx)
        if reference is None:
            return {
                "role": "assistant",
                "content": "scripted oracle: no reference for this conversation (register the rollout "
                "with a reference, or start the server with the environment's tasks)",
            }
        if self.accuracy < 1.0 and not self._knows(messages):
            return {"role": "assistant", "content": "I am not sure."}
        turn = _call_turns(messages) - (_call_turns(ctx.task.messages()) if ctx.task is not None else 0)
        turn = max(turn, 0)  # calls already in the task's input (a conversation so far) are not this rollout's
        if reference.parallel and turn == 0 and reference.tool_calls:  # every call in one turn
            calls = [_tool_call(c.id or f"call_oracle_{i}", c.name, c.arguments)
                     for i, c in enumerate(reference.tool_calls)]
            return {"role": "assistant", "content": None, "tool_calls": calls}
        if turn < len(reference.tool_calls) and not reference.parallel:
            call = reference.tool_calls[turn]
            call_id = call.id or f"call_oracle_{turn}"
            calls = [_tool_call(call_id, call.name, call.arguments)]
            return {"role": "assistant", "content": None, "tool_calls": calls}
        return {"role": "assistant", "content": reference.final_answer or ""}

    def _knows(self, messages: list[Message]) -> bool:
        """Whether this oracle "knows" a task: a fixed draw per (seed, prompt), so a weaker oracle
        (accuracy < 1) fails the same tasks on every call, as a weaker model would."""
        digest = hashlib.sha256(f"{self.seed}:{reference_key(messages)}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.accuracy

    def _lookup(self, messages: list[Message], ctx: CallContext) -> Reference | None:
        if not self.references:
            return None
        if ctx.task is not None and ctx.task.id in self.references:
            return self.references[ctx.task.id]
        # Harnesses may prepend their own user messages, so try each user message, first match wins.
        for message in messages:
            if message.get("role") == "user":
                found = self.references.get(_key(message.get("content")))
                if found is not None:
                    return found
        return None

    def _policy_constant(self, messages: list[Message], ctx: CallContext) -> dict[str, Any]:
        return {"role": "assistant", "content": self.constant_text}

    def _policy_format(self, request: dict[str, Any]) -> dict[str, Any]:
        """``constant``, except that a request asking for JSON (``response_format``) gets a JSON value of
        the requested schema (``schema_instance``): a scripted judge whose reply the verifier can parse."""
        wants_json, schema = requested_schema(request)
        if not wants_json:
            return self._policy_constant([], CallContext())
        return {"role": "assistant", "content": orjson.dumps(instance(schema) if schema is not None else {}).decode()}

    def _policy_echo(self, messages: list[Message], ctx: CallContext) -> dict[str, Any]:
        last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        return {"role": "assistant", "content": content_text(last.get("content")) if last else ""}

    def _policy_replay(self, messages: list[Message], ctx: CallContext) -> dict[str, Any]:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        return dict(self.replay[min(turn, len(self.replay) - 1)])

    def _policy_null(self, messages: list[Message], ctx: CallContext) -> dict[str, Any]:
        return {"role": "assistant", "content": ""}

    # ---- response ----------------------------------------------------------------------------
    def _response(
        self, request: dict[str, Any], messages: list[Message], message: dict[str, Any], n: int = 1
    ) -> dict[str, Any]:
        """``n`` choices of the policy's one deterministic answer (a fixed policy has one sample)."""
        prompt_chars = sum(len(content_text(m.get("content"))) for m in messages)
        completion_chars = len(message.get("content") or "") + sum(
            len(c["function"]["arguments"]) + len(c["function"]["name"])
            for c in message.get("tool_calls") or []
        )
        prompt_tokens, completion_tokens = prompt_chars // 4, n * (completion_chars // 4)
        return {
            "id": f"chatcmpl-{self.name}-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.name,
            "choices": [
                {
                    "index": i,
                    "message": message if i == 0 else orjson.loads(orjson.dumps(message)),
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    "logprobs": None,
                }
                for i in range(n)
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
