"""Tool calls for small local models: the Hermes-style text format, its parser, and a grammar constraint.

Small instruction models have no tool-call head; they write ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` in their text, which is parsed here into OpenAI ``tool_calls``. A block that does not
parse is left in the content and counted, so a trajectory shows the model's malformed call instead of
silently losing it. With ``tool_choice="required"`` (or a named function) decoding is constrained by
llguidance, a maintained structured-generation library (used by vLLM, SGLang and llama.cpp), with a
grammar built from the tools' JSON schemas, so even a 135M model emits a call that parses.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)


def functions(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ``function`` objects of OpenAI tool definitions (other tool types are ignored)."""
    out = []
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append(fn)
    return out


def system_prompt(tools: list[dict[str, Any]]) -> str:
    """How the tools and the call format are described to a model whose chat template knows no tools."""
    signatures = "\n".join(json.dumps({"type": "function", "function": fn}, ensure_ascii=False)
                           for fn in functions(tools))
    return (
        "You can call functions to help with the user's request. The functions are described as JSON "
        f"inside <tools></tools>:\n<tools>\n{signatures}\n</tools>\n\n"
        "To call a function, answer with a JSON object holding its name and arguments, inside "
        "<tool_call></tool_call> tags:\n<tool_call>\n{\"name\": \"function_name\", \"arguments\": "
        "{\"argument\": \"value\"}}\n</tool_call>\nIf no function is needed, answer in plain text."
    )


def render_call(name: str, arguments: Any) -> str:
    """An assistant's earlier call, written back into the prompt in the same format the model emits."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # keep the raw string: the prompt must show what was sent
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


def _call_id(seed: str, index: int, name: str, arguments: str) -> str:
    digest = hashlib.sha256(f"{seed}|{index}|{name}|{arguments}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def _as_call(obj: Any, names: set[str]) -> tuple[str, str] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    if names and obj["name"] not in names:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return obj["name"], json.dumps(args, ensure_ascii=False)


def parse(text: str, tools: list[dict[str, Any]] | None, id_seed: str
          ) -> tuple[str | None, list[dict[str, Any]], int]:
    """Split ``text`` into (content, OpenAI tool_calls, number of blocks that failed to parse).

    A block parses when it holds a JSON object (or a list of them) with a known ``name`` and object
    ``arguments``; an unterminated block at the end (the model ran out of tokens) is tried too. Ids are
    derived from ``id_seed`` (the prompt) and the call, so the same completion always has the same ids."""
    names = {fn["name"] for fn in functions(tools)}
    calls: list[dict[str, Any]] = []
    failures = 0
    kept: list[str] = []
    last = 0
    for match in _BLOCK.finditer(text):
        kept.append(text[last:match.start()])
        last = match.end()
        try:
            payload = json.loads(match.group(1).strip())
        except json.JSONDecodeError:
            payload = None
        items = payload if isinstance(payload, list) and payload else [payload]
        parsed = [_as_call(item, names) for item in items]
        if any(p is None for p in parsed):
            failures += 1
            kept.append(match.group(0))
            continue
        for name, args in (p for p in parsed if p is not None):
            calls.append({"id": _call_id(id_seed, len(calls), name, args), "type": "function",
                          "function": {"name": name, "arguments": args}})
    kept.append(text[last:])
    content = "".join(kept).strip() if calls else "".join(kept)
    return (content or None) if calls else content, calls, failures


def _strict(schema: Any) -> Any:
    """Close objects that list their properties: a small model otherwise invents extra keys forever."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def call_schema(tools: list[dict[str, Any]], only: str | None = None) -> dict[str, Any]:
    """JSON schema of one call ``{"name": <tool>, "arguments": <its parameters>}`` to any (or one) tool."""
    options = []
    for fn in functions(tools):
        if only is not None and fn["name"] != only:
            continue
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        options.append({"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                        "properties": {"name": {"const": fn["name"]}, "arguments": _strict(params)}})
    if not options:
        raise ValueError(f"no function tool named {only!r}" if only else "no function tools to call")
    return {"anyOf": options, "x-guidance": {"whitespace_flexible": False, "key_separator": ": ",
                                             "item_separator": ", ", "lenient": True}}


class ToolCallConstraint:
    """Allows exactly ``<tool_call>\\n{json matching a tool}\\n</tool_call>`` then end of text."""

    def __init__(self, lltokenizer: Any, tools: list[dict[str, Any]], vocab_size: int,
                 only: str | None = None) -> None:
        import llguidance

        schema = json.dumps(call_schema(tools, only))
        grammar = llguidance.LLMatcher.grammar_from_lark(
            f"start: {json.dumps(OPEN + chr(10))} %json {schema} {json.dumps(chr(10) + CLOSE)}")
        self.matcher = llguidance.LLMatcher(lltokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise ValueError(f"tool schemas do not compile to a grammar: {self.matcher.get_error()}")
        self.vocab_size = vocab_size
        self.failed = False

    def allowed(self) -> torch.Tensor | None:
        import torch

        if self.failed or self.matcher.is_error():
            self.failed = True
            return None
        bias = torch.frombuffer(bytearray(self.matcher.compute_logit_bias()), dtype=torch.uint8)
        mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        n = min(len(bias), self.vocab_size)
        mask[:n] = bias[:n] > 0
        if not bool(mask.any()):
            self.failed = True
            return None
        return mask

    def consume(self, token: int) -> None:
        if not self.failed and not self.matcher.consume_token(token):
            self.failed = True
