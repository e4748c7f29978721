"""Exact continuation on the local model: a prompt made of a rollout's previous ids plus the new turn.

A chat template re-renders the whole conversation on every turn, and its rendering of the model's own
earlier output is often not the tokens the model sampled (a tool call re-serialised, other whitespace,
BPE merging across the boundary: ``c|anc|el`` sampled, ``cancel`` re-rendered). A request that carries

- ``continue_token_ids``: the previous call's prompt ids followed by its generated ids, and
- ``continue_messages``: how many leading ``messages`` those ids stand for,

gets as its prompt those ids followed by the template's tokens for the new messages only
(``continued_prompt``), so a multi-turn rollout's prompts extend each other token for token.
``palaestra.server.continuation.ContinuationBackend`` adds the two fields per rollout; ``LocalBackend``
honours them. Pure functions over a render and an encode callable: importing this imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from palaestra.models.local import prompt as prompt_mod

Message = dict[str, Any]
CONTINUE_IDS = "continue_token_ids"
CONTINUE_MESSAGES = "continue_messages"


def render_text(tokenizer: Any, messages: list[Message], tools: list[dict[str, Any]] | None,
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


def continued_prompt(render: Callable[[list[Message], bool], str], encode: Callable[[str], list[int]],
                     messages: list[Message], continue_ids: list[int], covered: int,
                     end_texts: Iterable[str], ended: bool) -> list[int] | None:
    """Prompt ids = ``continue_ids`` + the tokens of everything the template adds after them.

    ``render(msgs, add_generation_prompt)`` is the backend's own template rendering, ``encode`` its
    tokenizer (no special tokens added). The template's text for ``messages[:covered]`` must be a prefix of
    its text for all ``messages``; what follows the end of the last covered assistant turn (the text after
    its end-of-turn marker, one of ``end_texts``) is tokenized and appended. ``ended`` says whether the
    generation stopped on an end-of-turn token; if not (cut by a length limit), the marker is appended too.
    ``None`` when the conversation cannot be continued (the caller renders from scratch)."""
    if not continue_ids or not 0 < covered < len(messages) or messages[covered - 1].get("role") != "assistant":
        return None
    head = render(messages[:covered], False)
    full = render(messages, True)
    if not full.startswith(head):
        return None
    cut = max(((head.rfind(t), t) for t in end_texts if t), default=(-1, ""))
    if cut[0] < 0:
        return None
    tail = head[cut[0] + (len(cut[1]) if ended else 0):]
    return list(continue_ids) + encode(tail + full[len(head):])


def continued_ids(tokenizer: Any, eos: Iterable[int], request: dict[str, Any], messages: list[Message],
                  tools: list[dict[str, Any]] | None) -> tuple[list[int] | None, bool]:
    """(prompt ids, whether the request asked to continue). ``(None, True)``: it asked, but the template
    cannot extend those ids (the caller renders from scratch and says so); ``(None, False)``: it did not
    ask. Malformed fields raise ``ValueError`` (the backend answers a 400 naming them)."""
    ids, covered = request.get(CONTINUE_IDS), request.get(CONTINUE_MESSAGES)
    if ids is None:
        return None, False
    if (not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
            or not isinstance(covered, int) or isinstance(covered, bool)):
        raise ValueError(f"'{CONTINUE_IDS}' must be a list of token ids and '{CONTINUE_MESSAGES}' an integer")
    eos_ids = set(eos)
    ends = [tokenizer.convert_ids_to_tokens(i) for i in eos_ids]
    out = continued_prompt(
        lambda msgs, gen: render_text(tokenizer, msgs, tools, gen),
        lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"]),
        messages, ids, covered, [e for e in ends if isinstance(e, str)],
        ended=bool(ids) and ids[-1] in eos_ids)
    return out, True
