"""From an OpenAI messages list to the exact prompt token ids, through the model's own chat template.

A template that knows tools (Qwen, Hermes, Llama 3.1 …) gets ``tools`` and structured tool calls as
transformers expects them. One that does not (SmolLM2's) gets the tools described in a system message
and earlier calls and results written as text in the format the parser reads back, so the model sees
one consistent convention. The prompt ids are the tokenization of the rendered text, without adding
special tokens twice (the template already wrote them).
"""

from __future__ import annotations

import json
from typing import Any

from palaestra.models.local import toolcalls

# Used only for a model directory that ships no chat template (a base model): plain ChatML.
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def text_of(content: Any) -> str:
    """Message content as text: strings stay, text parts are joined, anything else is empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def template_of(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default") or next(iter(template.values()), None)
    return template if isinstance(template, str) else ""


def native_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders a ``tools`` argument itself."""
    return "tools" in template_of(tokenizer)


def _native(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": "system" if m.get("role") == "developer" else m.get("role"),
                               "content": text_of(m.get("content"))}
        if m.get("tool_calls"):
            msg["tool_calls"] = []
            for call in m["tool_calls"]:
                fn = call.get("function", call)
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        pass
                msg["tool_calls"].append({"id": call.get("id"), "type": "function",
                                          "function": {"name": fn.get("name"), "arguments": args}})
        for key in ("tool_call_id", "name"):
            if m.get(key):
                msg[key] = m[key]
        out.append(msg)
    return out


def _as_text(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        role = "system" if m.get("role") == "developer" else str(m.get("role") or "user")
        content = text_of(m.get("content"))
        if role == "assistant" and m.get("tool_calls"):
            calls = [toolcalls.render_call(c.get("function", c).get("name", ""),
                                           c.get("function", c).get("arguments")) for c in m["tool_calls"]]
            content = "\n".join(([content] if content else []) + calls)
        elif role == "tool":
            content = f"<tool_response>\n{content}\n</tool_response>"
        out.append({"role": role, "content": content})
    if tools:
        described = toolcalls.system_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{described}"}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out


def render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
           ) -> tuple[str, list[int]]:
    """The prompt text the template produces, and its token ids."""
    if not template_of(tokenizer):
        tokenizer.chat_template = CHATML
    if tools and native_tools(tokenizer):
        text = tokenizer.apply_chat_template(_native(messages), tools=tools, tokenize=False,
                                             add_generation_prompt=True)
    else:
        text = tokenizer.apply_chat_template(_as_text(messages, tools), tokenize=False,
                                             add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, list(ids)
