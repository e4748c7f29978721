"""NeMo Gym rows → Palaestra tasks: a row's verifier fields as the fields its native environment reads, and
its Responses request as the chat request Palaestra's agents send.

NeMo Gym puts the verifier's inputs at the top level of the row (``instruction_id_list``, ``schema_str``,
``expected_action``, ...). Palaestra's native environments read their own fields (``constraints``,
``schema``, ``expected_calls``, ...). ``to_native(env, metadata, server)`` turns the NeMo Gym verifier
fields of one row into the fields that environment reads. The NeMo Gym fields stay in the row as they
were (exports give them back unchanged); the native fields are added beside them and never overwrite a
field the row already has. Which environment a row goes to is ``nemo_gym_families`` (the family table).

Nothing here imports NeMo Gym: the translation works from the row alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from palaestra.core.records import Task
from palaestra.wire.responses import ReasoningMode, responses_to_chat
from palaestra.wire.translate import TranslationError

# ---- verifier fields → native fields ----------------------------------------------------------------

def _nested(meta: dict[str, Any], key: str) -> Any:
    """A verifier field at the top level of the row, else under ``verifier_metadata`` (both NeMo Gym
    layouts exist)."""
    if key in meta:
        return meta[key]
    vm = meta.get("verifier_metadata")
    return vm.get(key) if isinstance(vm, dict) else None


def _json_arguments(raw: Any) -> Any:
    """Responses-API arguments are a JSON string; some rows give an object. Unparseable text stays as it
    is, so the environment's check reports it."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw if raw is not None else {}


def _ifeval(meta: dict[str, Any], server: str | None) -> dict[str, Any]:
    ids, kwargs = _nested(meta, "instruction_id_list"), _nested(meta, "kwargs")
    if not isinstance(ids, list):
        return {}
    if not isinstance(kwargs, list):
        kwargs = [{} for _ in ids]
    constraints: list[Any] = []
    for i, ident in enumerate(ids):
        params = kwargs[i] if i < len(kwargs) and isinstance(kwargs[i], dict) else {}
        constraints.append({"kind": ident, **{k: v for k, v in params.items() if v is not None}})
    mode = _nested(meta, "grading_mode") or ("binary" if server == "instruction_following" else None)
    out: dict[str, Any] = {"constraints": constraints, "instructions_in_prompt": True}
    if mode:
        out["grading_mode"] = mode
    return out


def _json_schema(meta: dict[str, Any]) -> dict[str, Any]:
    raw = _nested(meta, "schema_str")
    if not isinstance(raw, str):
        return {}
    try:
        schema: Any = json.loads(raw)
    except ValueError:
        schema = raw  # not JSON: json_schema's check_task says so
    out: dict[str, Any] = {"schema": schema, "show_schema": False}
    fmt = _nested(meta, "schema_type")
    if isinstance(fmt, str):
        out["schema_format"] = fmt
    if _nested(meta, "response_mode") == "tool_call" and isinstance(_nested(meta, "tool_name"), str):
        out["answer_tool"] = _nested(meta, "tool_name")
        key = _nested(meta, "tool_payload_key")
        if isinstance(key, str) and key:
            out["answer_tool_key"] = key
    return out


def _call(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        return {"name": None, "arguments": item}
    return {"name": item.get("name"), "arguments": _json_arguments(item.get("arguments"))}


def _tool_call(meta: dict[str, Any]) -> dict[str, Any]:
    action = _nested(meta, "expected_action")
    if isinstance(action, dict):
        kind = action.get("type", "function_call")
        if kind == "message":
            content = action.get("content")
            return {"expected_calls": [], "reference_answer": content if isinstance(content, str) else ""}
        if kind == "function_call_batch":
            return {"expected_calls": [_call(c) for c in action.get("calls") or []],
                    "ordered": bool(action.get("ordered", False))}
        return {"expected_calls": [_call(action)]}
    one = _nested(meta, "expected_call")
    if isinstance(one, dict):
        return {"expected_calls": [_call(one)]}
    many = _nested(meta, "expected_answers")
    if isinstance(many, list):
        return {"expected_calls": [_call(c) for c in many]}
    return {}


def _sql(meta: dict[str, Any]) -> dict[str, Any]:
    gold = _nested(meta, "sql")
    if not isinstance(gold, str):
        return {}
    out: dict[str, Any] = {"gold_sql": gold}
    dialect = _nested(meta, "sql_dialect")
    if isinstance(dialect, str):
        out["sql_dialect"] = dialect.lower()
    context = _nested(meta, "sql_context")
    if isinstance(context, str):
        out["db_script"] = context
    return out


def _reasoning_gym(meta: dict[str, Any]) -> dict[str, Any]:
    question, answer, inner = meta.get("question"), meta.get("answer"), meta.get("metadata")
    if not isinstance(inner, dict) or not isinstance(inner.get("source_dataset"), str) or answer is None:
        return {}
    return {"entry": {"question": question, "answer": answer, "metadata": inner}}


def _judge(meta: dict[str, Any]) -> dict[str, Any]:
    expected = _nested(meta, "expected_answer")
    if expected is None:
        return {}
    return {"reference_answer": str(expected), "oracle_answer": str(expected)}


# Servers whose rows ask for the answer in a form of their own: the pattern NeMo Gym's server reads it with,
# given to mcqa as the row's template_metadata.output_regex (the capture is matched to a letter or option text).
_MCQA_ANSWER_FORMS = {"bunsenbench_chemistry_mcq": r"<choice>\s*(.*?)\s*</choice>"}


def _mcqa(meta: dict[str, Any], server: str | None) -> dict[str, Any]:
    pattern = _MCQA_ANSWER_FORMS.get(server or "")
    if pattern is None or isinstance(meta.get("template_metadata"), dict):
        return {}
    return {"template_metadata": {"output_regex": pattern}}


_TRANSLATE = {
    "mcqa": _mcqa,
    "ifeval": _ifeval,
    "json_schema": lambda m, s: _json_schema(m),
    "tool_call": lambda m, s: _tool_call(m),
    "sql": lambda m, s: _sql(m),
    "reasoning_gym": lambda m, s: _reasoning_gym(m),
    "judge": lambda m, s: _judge(m),
}


def to_native(env: str, metadata: dict[str, Any], server: str | None = None) -> dict[str, Any]:
    """``metadata`` with the native fields of ``env`` added from the row's NeMo Gym verifier fields.

    A field the row already has is kept (a row written for Palaestra wins); a row without the NeMo Gym
    fields comes back unchanged, so the environment's own ``check_task`` names what is missing."""
    translate = _TRANSLATE.get(env)
    if translate is None:
        return metadata
    added = translate(metadata, server)
    if not added:
        return metadata
    return {**metadata, **{k: v for k, v in added.items() if k not in metadata}}


# ---- the row's Responses request ------------------------------------------------------------------
# Request: ``responses_create_params`` is a Responses API request. It is kept as it is on the task
# (``metadata[REQUEST_KEY]``), so an exporter or a Responses-speaking consumer gets it unchanged, and
# translated exactly (``palaestra.wire.responses.responses_to_chat``) into the chat messages, tools and
# per-call settings (``tool_choice``, ``parallel_tool_calls``, sampling) Palaestra's agents send.

REQUEST_KEY = "nemo_gym_request"
AGENT_REF_KEY = "nemo_gym_agent_ref"
SAMPLING_KEY = "nemo_gym_sampling"
# A row's own ``id`` / ``uuid`` / ``task_id`` as written (of their own types: NeMo Gym's servers verify them),
# kept for rows that go to NeMo Gym's own server (``nemo_gym:<server>``), which gets the row back whole.
ROW_IDS_KEY = "nemo_gym_row_ids"
# A row whose id an earlier row of its file already has: NeMo Gym's own collector accepts repeated ids (they
# name a prompt, not a row), a run needs unique ones. The task's id gets the line (``1000#L4``), the id the
# row wrote is kept here (and, for NeMo Gym's own server, in ROW_IDS_KEY: it gets the row's id back).
ORIGINAL_ID_KEY = "nemo_gym_original_id"
# How the input's reasoning items reach a chat model: on the assistant turn they belong to, under the
# field vLLM and SGLang read back into the chat template (what NeMo Gym's own vLLM model server sends).
REASONING_MODE: ReasoningMode = "reasoning_content"
_CHAT_SETTINGS = ("temperature", "top_p", "max_tokens", "tool_choice", "parallel_tool_calls", "seed", "user",
                  "response_format", "reasoning_effort")
_TOOL_SETTINGS = ("tool_choice", "parallel_tool_calls")  # refused by chat servers in a request without tools


def chat_request(params: dict[str, Any]) -> dict[str, Any]:
    """The row's Responses request as a chat request (ValueError naming the field when it is malformed)."""
    try:
        return responses_to_chat(params, reasoning=REASONING_MODE)
    except TranslationError as exc:
        raise ValueError(f"responses_create_params: {exc}") from None


def chat_settings(chat: Mapping[str, Any]) -> dict[str, Any]:
    """The per-call settings of a chat request: not its messages, tools or model name."""
    settings = {k: chat[k] for k in _CHAT_SETTINGS if chat.get(k) is not None}
    if not chat.get("tools"):
        for k in _TOOL_SETTINGS:
            settings.pop(k, None)
    return settings


def task_settings(task: Task) -> dict[str, Any]:
    """The chat settings a NeMo Gym row asks of every model call of its rollout ({} for other rows);
    the run's own (``--temperature``, ``--max-tokens``, ...) are applied over them."""
    request = task.metadata.get(REQUEST_KEY)
    if not isinstance(request, dict):
        return {}
    try:
        chat = responses_to_chat(request, reasoning=REASONING_MODE)
    except TranslationError:
        return {}
    if task.tools:
        chat["tools"] = task.tools
    return chat_settings(chat)


def unique_id(task: Task, line: int, taken: Mapping[str, Any]) -> Task:
    """``task`` under an id no earlier row has (``<id>#L<line>``), with the id it wrote in ORIGINAL_ID_KEY."""
    new_id, n = f"{task.id}#L{line}", 1
    while new_id in taken:
        n += 1
        new_id = f"{task.id}#L{line}.{n}"
    return task.model_copy(update={"id": new_id, "metadata": {**task.metadata, ORIGINAL_ID_KEY: task.id}})
