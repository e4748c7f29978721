"""``LocalBackend``: an embedded transformers model behind the ModelBackend contract, with exact tokens.

Every response carries what a trainer needs in vLLM's field names: ``prompt_token_ids`` (top level),
``choices[i].token_ids`` (every sampled token, the final EOS included) and ``choices[i].logprobs.content``
(one raw-model logprob per sampled token). Requests run on the shared ``Engine`` thread, so the event
loop only renders prompts and builds responses.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
import time
import uuid
from typing import Any, TypeVar

from palaestra.core.errors import ModelError
from palaestra.models.base import CallContext
from palaestra.models.local import continuation, prompt, toolcalls
from palaestra.models.local.engine import Engine, Generation, Loaded, Params
from palaestra.models.local.loader import LoadOptions, eos_ids, load
from palaestra.models.local.weights import Notify
from palaestra.wire.requests import refuse

MAX_N = 64
B = TypeVar("B", bound="LocalBackend")


def _bad(message: str, hint: str | None = None) -> ModelError:
    return ModelError(message, hint=hint, status=400)


def _number(request: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = request.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise _bad(f"'{key}' must be a number within [{lo}, {hi}], got {value!r}")
    return float(value)


def _refuse_unhonoured(request: dict[str, Any]) -> None:
    """Sampling controls this engine does not implement are refused by name (HTTP 400), never ignored:
    a run that asked for a penalty or a JSON schema must not silently get plain sampling."""
    for key in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
        if request.get(key) not in (None, 0, 0.0, 1.0 if key == "repetition_penalty" else 0):
            raise refuse("local", key, "the local engine samples from the raw distribution without penalties")
    if request.get("top_k") not in (None, 0, -1):  # Anthropic's top_k arrives here through the translator
        raise refuse("local", "top_k", "the local engine samples with temperature and top_p only")
    if request.get("logit_bias"):
        raise refuse("local", "logit_bias", "the local engine does not bias logits")
    fmt = request.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise refuse("local", "response_format", "the local engine constrains decoding to tool calls only")


def _derived_seed(seed: int, index: int) -> int:
    """Choice 0 uses the request's seed; others get well-separated seeds (``n`` samples must differ)."""
    if index == 0:
        return seed % (1 << 63)
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "big") >> 1


class LocalBackend:
    """A local model answering Chat Completions. The model loads in the engine thread on first use (or
    at ``start()``), printing where the weights came from and how fast it runs."""

    name = "local"
    # honours continue_token_ids: the run wraps it in ContinuationBackend, so multi-turn rollouts are exact
    continues_tokens = True

    def __init__(self, model: str | None = None, *, dtype: str = "float32", threads: int | None = None,
                 max_batch: int = 32, default_max_tokens: int = 1024, pull: bool = True,
                 notify: Notify | None = None) -> None:
        self.options = LoadOptions(spec=model, dtype=dtype, threads=threads, pull=pull, notify=notify)
        self.model = load_name(model)
        self.default_max_tokens = default_max_tokens
        self.engine = Engine(lambda: load(self.options), max_batch=max_batch)
        self._lltokenizer: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Begin loading now rather than on the first request."""
        self.engine.start()

    async def ready(self) -> Loaded:
        loaded = self.engine.loaded
        if loaded.done() and loaded.exception() is None:  # the usual case: no trip through the loop
            return loaded.result()
        self.engine.start()
        try:
            return await asyncio.wrap_future(loaded)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"the local model {self.model!r} failed to load: {type(exc).__name__}: {exc}",
                             hint="check the path given as local:PATH, run `palaestra model pull` for the "
                                  "default model, and install the extra: pip install 'palaestra[local]'"
                             ) from exc

    async def aclose(self) -> None:
        await asyncio.to_thread(self.engine.close)

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        loaded = await self.ready()
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _bad("'messages' must be a non-empty list of message objects")
        _refuse_unhonoured(request)
        tools, constrain_to = self._tools(request)
        try:
            prompt_ids, meta = self._prompt_ids(loaded, request, messages, tools)
        except ModelError:
            raise
        except Exception as exc:
            raise _bad(f"the chat template could not render these messages: {type(exc).__name__}: {exc}",
                       hint="check the roles and contents of 'messages'") from exc
        params = self._params(request, loaded, len(prompt_ids))
        n = int(_number(request, "n", 1, 1, MAX_N))
        seed = request.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _bad(f"'seed' must be an integer, got {seed!r}")
        base_seed = seed if seed is not None else secrets.randbits(62)
        if constrain_to is not None and self._lltokenizer is None:  # ~0.3 s, once: not on the event loop
            await asyncio.to_thread(self._grammar_tokenizer, loaded)
        futures = []
        for i in range(n):
            constraint = self._constraint(loaded, tools, constrain_to) if constrain_to is not None else None
            choice_params = Params(**{**params.__dict__, "seed": _derived_seed(base_seed, i)})
            try:
                submitted = self.engine.submit(prompt_ids, choice_params, constraint)
            except RuntimeError as exc:
                raise ModelError(f"the local model backend is closed: {exc}",
                                 hint="create a new backend; aclose() ends this one") from exc
            futures.append(asyncio.wrap_future(submitted))
        try:
            results: list[Generation] = list(await asyncio.gather(*futures))
        except asyncio.CancelledError:
            for fut in futures:
                fut.cancel()
            raise
        except Exception as exc:
            raise ModelError(f"local model generation failed: {type(exc).__name__}: {exc}",
                             hint="see the server log; a smaller max_batch or shorter prompts use less memory"
                             ) from exc
        response = self._response(request, loaded, prompt_ids, tools, params, results, constrain_to is not None)
        if meta is not None:
            response["palaestra"] = meta
        return response

    @classmethod
    def from_model(cls: type[B], model: Any, tokenizer: Any, *, name: str | None = None, max_batch: int = 32,
                   default_max_tokens: int = 1024) -> B:
        """Serve ``model`` itself (weights shared, not copied): a trainer's updates are sampled from at once.

        The engine thread only runs forward passes between optimizer steps; the trainer must not step
        while rollouts are in flight."""
        self = cls(None, max_batch=max_batch, default_max_tokens=default_max_tokens, pull=False)
        if name:
            self.model = name
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        loaded = Loaded(model=model, tokenizer=tokenizer, eos_ids=eos_ids(model, tokenizer),
                        max_positions=int(getattr(config, "max_position_embeddings", 0) or 4096),
                        info={"name": self.model, "origin": "in-memory model", "dtype": str(model.dtype),
                              "vocab_size": int(getattr(config, "vocab_size", len(tokenizer)))})
        self.engine = Engine(lambda: loaded, max_batch=max_batch)
        return self

    # ---- request ----------------------------------------------------------------------------------
    def _prompt_ids(self, loaded: Loaded, request: dict[str, Any], messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None) -> tuple[list[int], dict[str, Any] | None]:
        """The prompt's token ids and what to report about them (``palaestra`` in the response).

        A request with ``continue_token_ids`` (set per rollout by ``ContinuationBackend``) continues a
        rollout's exact previous ids instead of re-rendering the conversation (``continuation.py``);
        ``palaestra.continued`` says whether it could."""
        try:
            ids, asked = continuation.continued_ids(loaded.tokenizer, loaded.eos_ids, request, messages, tools)
        except ValueError as exc:
            raise _bad(str(exc)) from None
        if ids is not None:
            return ids, {"continued": True}
        _, ids = prompt.render(loaded.tokenizer, messages, tools)
        return ids, ({"continued": False} if asked else None)

    def _tools(self, request: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
        """(tools to render, constraint): constraint is None (free text), "" (any tool) or a tool name."""
        tools = request.get("tools") or None
        choice = request.get("tool_choice") or "auto"
        if tools is not None and not isinstance(tools, list):
            raise _bad("'tools' must be a list of tool definitions")
        if choice == "none" or not tools:
            if choice == "required" or isinstance(choice, dict):
                raise _bad(f"tool_choice={choice!r} needs a non-empty 'tools' list")
            return (None if choice == "none" else tools), None
        if choice == "required":
            return tools, ""
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name") or choice.get("name")
            if name not in {fn["name"] for fn in toolcalls.functions(tools)}:
                raise _bad(f"tool_choice names {name!r}, which is not among the request's tools")
            return tools, name
        if choice != "auto":
            raise _bad(f"unknown tool_choice {choice!r}", hint='use "auto", "none", "required" or '
                       '{"type": "function", "function": {"name": ...}}')
        return tools, None

    def _params(self, request: dict[str, Any], loaded: Loaded, prompt_len: int) -> Params:
        room = loaded.max_positions - prompt_len
        if room <= 0:
            raise _bad(f"the prompt has {prompt_len} tokens; the model {self.model!r} takes at most "
                       f"{loaded.max_positions}", hint="shorten the conversation")
        requested = request.get("max_completion_tokens") or request.get("max_tokens")
        if requested is not None and (isinstance(requested, bool) or not isinstance(requested, int)
                                      or requested < 1):
            raise _bad(f"'max_tokens' must be a positive integer, got {requested!r}")
        stop = request.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(s for s in stop if isinstance(s, str) and s)
        top_logprobs = int(_number(request, "top_logprobs", 0, 0, 20)) if request.get("logprobs") else 0
        return Params(max_new_tokens=min(requested or self.default_max_tokens, room),
                      temperature=_number(request, "temperature", 1.0, 0.0, 2.0),
                      top_p=_number(request, "top_p", 1.0, 0.0, 1.0), stop=stop,
                      ignore_eos=bool(request.get("ignore_eos", False)), top_logprobs=top_logprobs)

    def _grammar_tokenizer(self, loaded: Loaded) -> Any:
        with self._lock:
            if self._lltokenizer is None:
                try:
                    import llguidance.hf
                except ImportError as exc:
                    raise ModelError("constrained tool calls need llguidance",
                                     hint="pip install 'palaestra[local]'") from exc
                self._lltokenizer = llguidance.hf.from_tokenizer(loaded.tokenizer)
            return self._lltokenizer

    def _constraint(self, loaded: Loaded, tools: list[dict[str, Any]] | None, only: str) -> Any:
        lltokenizer = self._grammar_tokenizer(loaded)
        try:
            vocab = int(loaded.info.get("vocab_size", len(loaded.tokenizer)))
            return toolcalls.ToolCallConstraint(lltokenizer, tools or [], vocab, only or None)
        except ValueError as exc:
            raise _bad(f"cannot constrain decoding to these tools: {exc}") from exc

    # ---- response ---------------------------------------------------------------------------------
    def _choice(self, index: int, loaded: Loaded, prompt_ids: list[int], tools: list[dict[str, Any]] | None,
                params: Params, gen: Generation, constrained: bool) -> dict[str, Any]:
        tok = loaded.tokenizer
        text = tok.decode(gen.token_ids, skip_special_tokens=True)
        finish, stop_reason = gen.finish_reason, None
        hits = [(text.find(s), s) for s in params.stop if s in text]
        if hits:
            cut, stop_reason = min(hits)
            text, finish = text[:cut], "stop"
        content: str | None = text
        calls: list[dict[str, Any]] = []
        failures = 0
        if tools:
            seed = hashlib.sha256(repr((prompt_ids, index)).encode()).hexdigest()
            content, calls, failures = toolcalls.parse(text, tools, seed)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
            finish = "tool_calls" if finish != "length" else finish
        pieces = tok.batch_decode([[t] for t in gen.token_ids])
        content_lp = [{"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8")),
                       "top_logprobs": [{"token": tok.decode([t]), "logprob": v, "bytes": None}
                                        for t, v in top]}
                      for piece, lp, top in zip(pieces, gen.logprobs, gen.top_logprobs, strict=True)]
        return {"index": index, "message": message, "finish_reason": finish, "stop_reason": stop_reason,
                "logprobs": {"content": content_lp}, "token_ids": list(gen.token_ids),
                "palaestra": {"tool_parse_failures": failures, "constrained": constrained}}

    def _response(self, request: dict[str, Any], loaded: Loaded, prompt_ids: list[int],
                  tools: list[dict[str, Any]] | None, params: Params, results: list[Generation],
                  constrained: bool) -> dict[str, Any]:
        choices = [self._choice(i, loaded, prompt_ids, tools, params, gen, constrained)
                   for i, gen in enumerate(results)]
        completion = sum(len(g.token_ids) for g in results)
        return {"id": f"chatcmpl-local-{uuid.uuid4().hex}", "object": "chat.completion",
                "created": int(time.time()), "model": self.model, "prompt_token_ids": list(prompt_ids),
                "choices": choices,
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": completion,
                          "total_tokens": len(prompt_ids) + completion}}


def load_name(spec: str | None) -> str:
    """The name the backend reports for a model spec (``/v1/models``, ``model`` in responses)."""
    from pathlib import Path

    from palaestra.models.local.weights import DEFAULT_MODEL

    if not spec or spec.lower() in ("default", "smollm2", DEFAULT_MODEL.lower()):
        return DEFAULT_MODEL
    path = Path(spec)
    return path.stem if path.suffix == ".gguf" else path.name or spec
