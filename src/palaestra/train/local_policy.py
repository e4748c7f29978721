"""The local backend as a training policy: shared in-memory weights and exact continuation.

``LocalBackend.from_model(model, tokenizer)`` serves the very ``torch.nn.Module`` being trained (every
rollout samples from the current weights, no save/reload per step). This subclass adds what only training
needs: ``continue_token_ids`` / ``continue_messages`` in the chat request (set by ``ContinuationBackend``)
make the prompt those exact ids followed by the template's tokens for the new messages, so a multi-turn
rollout's prompts extend each other token for token.

Importing this module imports torch (the ``[local]`` extra).
"""

from __future__ import annotations

from typing import Any

from palaestra.models.local import prompt as prompt_mod
from palaestra.models.local.backend import LocalBackend, _bad
from palaestra.models.local.engine import Loaded
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
    """``LocalBackend`` + exact continuation (``continue_token_ids``); ``from_model`` is inherited."""

    def _prompt_ids(self, loaded: Loaded, request: dict[str, Any], messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None) -> tuple[list[int], dict[str, Any] | None]:
        ids, covered = request.get(CONTINUE_IDS), request.get(CONTINUE_MESSAGES)
        if ids is None:
            return super()._prompt_ids(loaded, request, messages, tools)
        if (not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
                or not isinstance(covered, int) or isinstance(covered, bool)):
            raise _bad(f"'{CONTINUE_IDS}' must be a list of token ids and '{CONTINUE_MESSAGES}' an integer")
        tok = loaded.tokenizer
        ends = [tok.convert_ids_to_tokens(i) for i in loaded.eos_ids]
        prompt_ids = continued_prompt(
            lambda msgs, gen: render_text(tok, msgs, tools, gen),
            lambda text: list(tok(text, add_special_tokens=False)["input_ids"]),
            messages, ids, covered, [e for e in ends if isinstance(e, str)],
            ended=bool(ids) and ids[-1] in loaded.eos_ids)
        if prompt_ids is None:  # the template cannot extend these ids: render from scratch, and say so
            return super()._prompt_ids(loaded, request, messages, tools)[0], {"continued": False}
        return prompt_ids, {"continued": True}
