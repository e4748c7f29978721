"""The local backend as a training policy: shared in-memory weights and exact continuation.

Two things a trainer needs from the embedded model that ``LocalBackend`` does not offer yet (see the
report of issue 8 for the hooks proposed there; this subclass is the stand-in until they exist):

- ``from_model(model, tokenizer)``: serve the very ``torch.nn.Module`` being trained, so every rollout
  samples from the current weights (on-policy) with no save/reload per step. The engine thread only
  runs forward passes between optimizer steps; the trainer must not step while rollouts are in flight.
- ``continue_token_ids`` / ``continue_messages`` in the chat request (set by ``ContinuationBackend``):
  the prompt becomes those exact ids followed by the template's tokens for the new messages, so a
  multi-turn rollout's prompts extend each other token for token.

Importing this module imports torch (the ``[local]`` extra).
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from palaestra.core.errors import ModelError
from palaestra.models.base import CallContext
from palaestra.models.local import prompt as prompt_mod
from palaestra.models.local.backend import MAX_N, LocalBackend, _bad, _derived_seed, _number
from palaestra.models.local.engine import Engine, Generation, Loaded, Params
from palaestra.models.local.loader import eos_ids
from palaestra.train.continuation import CONTINUE_IDS, CONTINUE_MESSAGES, continued_prompt


def render_text(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                add_generation_prompt: bool) -> str:
    """``prompt.render``'s text, with the generation prompt optional (continuation needs both forms)."""
    if not prompt_mod.template_of(tokenizer):
        tokenizer.chat_template = prompt_mod.CHATML
    if tools and prompt_mod.native_tools(tokenizer):
        text = tokenizer.apply_chat_template(prompt_mod._native(messages), tools=tools, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    else:
        text = tokenizer.apply_chat_template(prompt_mod._as_text(messages, tools), tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    return str(text)


class TrainableLocalBackend(LocalBackend):
    """``LocalBackend`` + ``from_model`` + exact continuation (``continue_token_ids``)."""

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, name: str | None = None, max_batch: int = 32,
                   default_max_tokens: int = 1024) -> TrainableLocalBackend:
        """Serve ``model`` itself (weights shared, not copied): updates to it are sampled from at once."""
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

    def _continued_ids(self, loaded: Loaded, request: dict[str, Any], tools: list[dict[str, Any]] | None
                       ) -> list[int] | None:
        ids, covered = request.get(CONTINUE_IDS), request.get(CONTINUE_MESSAGES)
        if ids is None:
            return None
        if (not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
                or not isinstance(covered, int) or isinstance(covered, bool)):
            raise _bad(f"'{CONTINUE_IDS}' must be a list of token ids and '{CONTINUE_MESSAGES}' an integer")
        tok = loaded.tokenizer
        ends = [tok.convert_ids_to_tokens(i) for i in loaded.eos_ids]
        return continued_prompt(
            lambda msgs, gen: render_text(tok, msgs, tools, gen),
            lambda text: list(tok(text, add_special_tokens=False)["input_ids"]),
            request["messages"], ids, covered, [e for e in ends if isinstance(e, str)],
            ended=bool(ids) and ids[-1] in loaded.eos_ids)

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        if request.get(CONTINUE_IDS) is None:
            return await super().chat(request, ctx)
        loaded = await self.ready()
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _bad("'messages' must be a non-empty list of message objects")
        tools, constrain_to = self._tools(request)
        try:
            prompt_ids = self._continued_ids(loaded, request, tools)
            continued = prompt_ids is not None
            if prompt_ids is None:
                _, prompt_ids = prompt_mod.render(loaded.tokenizer, messages, tools)
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
        if constrain_to is not None and self._lltokenizer is None:
            await asyncio.to_thread(self._grammar_tokenizer, loaded)
        futures = []
        for i in range(n):
            constraint = self._constraint(loaded, tools, constrain_to) if constrain_to is not None else None
            choice_params = Params(**{**params.__dict__, "seed": _derived_seed(base_seed, i)})
            try:
                futures.append(asyncio.wrap_future(self.engine.submit(prompt_ids, choice_params, constraint)))
            except RuntimeError as exc:
                raise ModelError(f"the local model backend is closed: {exc}",
                                 hint="create a new backend; aclose() ends this one") from exc
        try:
            results: list[Generation] = list(await asyncio.gather(*futures))
        except asyncio.CancelledError:
            for fut in futures:
                fut.cancel()
            raise
        except Exception as exc:
            raise ModelError(f"local model generation failed: {type(exc).__name__}: {exc}") from exc
        response = self._response(request, loaded, prompt_ids, tools, params, results, constrain_to is not None)
        response["palaestra"] = {"continued": continued}
        return response
