"""Write a Palaestra run as NeMo Gym rollouts, so NeMo Gym's own tools (reward profiling, aggregate
metrics, pass@k, trainers that read its rollout files) can read it.

NeMo Gym's rollout collection writes three files beside each other, and so does this exporter:

- ``OUT`` (e.g. ``rollouts.jsonl``): one *verify response* per scored rollout: the task's
  ``responses_create_params``, the ``response`` (a Responses-API object whose ``output`` holds the
  assistant messages, function calls and function-call outputs in order), ``reward``, the task's
  verifier fields at the top level, ``_ng_task_index`` / ``_ng_rollout_index`` and ``agent_ref``.
- ``OUT_materialized_inputs.jsonl``: the input row of every rollout that was attempted (what
  ``gym eval profile`` aligns results against).
- ``OUT_failures.jsonl``: rollouts that never scored (an infrastructure failure), with no reward,
  because NeMo Gym, like Palaestra, never counts a failure as 0.

Reading NeMo Gym *task rows* is ``palaestra.rollout.tasks.from_nemo_gym``; this is the other direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from palaestra.adapters.nemo_gym_trajectory import observability
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Rollout, Task

TASK_INDEX = "_ng_task_index"
ROLLOUT_INDEX = "_ng_rollout_index"
ATTEMPT_INDEX = "_ng_attempt_index"
_RESERVED = {"responses_create_params", "response", "reward", "agent_ref", "mask_sample", "reward_components"}
_INTERNAL_META = {"nemo_gym_agent_ref", "nemo_gym_sampling", "nemo_gym_request", "nemo_gym_original_id"}


@dataclass
class NemoGymExport:
    rollouts: Path
    materialized_inputs: Path
    failures: Path | None
    scored: int = 0
    failed: int = 0
    skipped_tasks: list[str] = field(default_factory=list)


def sibling(out: Path, suffix: str) -> Path:
    """``results/rollouts.jsonl`` → ``results/rollouts<suffix>.jsonl`` (NeMo Gym's naming)."""
    return out.with_name(out.stem + suffix + ".jsonl")


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def assistant_items(message: dict[str, Any], item_id: str, i: int) -> list[dict[str, Any]]:
    """One assistant chat message as Responses output items: its text (when it has text or no tool
    calls), then one ``function_call`` per tool call. Shared by the rollout export and by the ``response``
    that NeMo Gym's verify reads (adapters/nemo_gym_server.py), so both speak the same Responses."""
    items: list[dict[str, Any]] = []
    text = _text(message.get("content"))
    if text or not message.get("tool_calls"):
        items.append({"id": item_id, "type": "message", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for j, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        args = fn.get("arguments", "{}")
        items.append({"type": "function_call", "call_id": str(tc.get("id") or f"call_{i}_{j}"),
                      "name": str(fn.get("name", "")), "status": "completed",
                      "arguments": args if isinstance(args, str) else orjson.dumps(args).decode()})
    return items


def tool_output_item(message: dict[str, Any]) -> dict[str, Any]:
    """A tool chat message as a Responses ``function_call_output`` item."""
    return {"type": "function_call_output", "call_id": str(message.get("tool_call_id") or ""),
            "output": _text(message.get("content"))}


def _input_item(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role") if message.get("role") in ("user", "assistant", "system", "developer") else "user"
    return {"role": role, "content": _text(message.get("content")), "type": "message"}


def _responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions function tool → the Responses API's flat function tool."""
    inner = tool.get("function")
    fn: dict[str, Any] = inner if tool.get("type") == "function" and isinstance(inner, dict) else tool
    return {"type": "function", "name": fn.get("name", ""), "description": fn.get("description") or "",
            "parameters": fn.get("parameters") or {"type": "object", "properties": {}}, "strict": False}


def _token_fields(call: Any) -> dict[str, Any]:
    """Token ids and logprobs of one model call, in NeMo Gym's training-variant field names."""
    if call is None or call.prompt_token_ids is None or call.generation_token_ids is None \
            or call.generation_logprobs is None:
        return {}
    return {"prompt_token_ids": list(call.prompt_token_ids), "generation_token_ids": list(call.generation_token_ids),
            "generation_log_probs": list(call.generation_logprobs)}


def turn_groups(rollout: Rollout, first: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """The conversation after the prompt as Responses items, grouped: ``("model", items)`` for each
    assistant turn (one model call), ``("env", items)`` for what came back (tool outputs, user messages).
    Token ids of the n-th model call go on the n-th assistant turn's last item (where NeMo RL looks)."""
    groups: list[tuple[str, list[dict[str, Any]]]] = []
    messages = rollout.trajectory.messages[first:]
    calls = rollout.trajectory.model_calls
    turn = 0
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            items: list[dict[str, Any]] = []
            if m.get("reasoning_content"):
                items.append({"id": f"rs_{rollout.rollout_id}_{i}", "type": "reasoning",
                              "summary": [{"type": "summary_text", "text": str(m["reasoning_content"])}]})
            items += assistant_items(m, f"msg_{rollout.rollout_id}_{i}", i)
            tokens = _token_fields(calls[turn] if turn < len(calls) else None)
            if tokens and items:
                items[-1].update(tokens)
            groups.append(("model", items))
            turn += 1
            continue
        if role == "tool":
            item = tool_output_item(m)
        elif role in ("user", "system", "developer"):
            item = _input_item(m)
        else:
            continue
        if groups and groups[-1][0] == "env":
            groups[-1][1].append(item)
        else:
            groups.append(("env", [item]))
    answer = rollout.trajectory.final_answer
    last = groups[-1][1][-1:] if groups else []
    if answer and not any(it.get("type") == "message" and it.get("role") == "assistant" for it in last):
        groups.append(("final", [{"id": f"msg_{rollout.rollout_id}_final", "type": "message", "role": "assistant",
                                  "status": "completed",
                                  "content": [{"type": "output_text", "text": answer, "annotations": []}]}]))
    return groups


def _prompt_length(messages: list[dict[str, Any]]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") in ("system", "developer", "user"):
        n += 1
    return n


def create_params(task: Task, rollout: Rollout | None) -> dict[str, Any]:
    """What the policy was asked: the messages before its first turn, the tools, the sampling knobs.

    A task read from a NeMo Gym row gives back that row's request as it was (every input item, its
    tools and settings), with only the sampling knobs the run overrode set to what was sent."""
    first = rollout.trajectory.model_calls[0].request if rollout and rollout.trajectory.model_calls else {}
    original = task.metadata.get("nemo_gym_request")
    if isinstance(original, dict):
        asked = dict(original)
        for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("max_tokens", "max_output_tokens"),
                             ("max_completion_tokens", "max_output_tokens")):
            if isinstance(first.get(ours), (int, float)) and not isinstance(first.get(ours), bool):
                asked[theirs] = first[ours]
        return asked
    messages = rollout.trajectory.messages if rollout is not None else []
    prompt = messages[:_prompt_length(messages)] or task.messages()
    request = rollout.trajectory.model_calls[0].request if rollout and rollout.trajectory.model_calls else {}
    tools = request.get("tools") or task.tools or []
    params: dict[str, Any] = {"input": [_input_item(m) for m in prompt],
                              "tools": [_responses_tool(t) for t in tools if isinstance(t, dict)]}
    sampling = dict(task.metadata.get("nemo_gym_sampling") or {})
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p"), ("max_tokens", "max_output_tokens"),
                         ("max_completion_tokens", "max_output_tokens"), ("max_output_tokens", "max_output_tokens")):
        if isinstance(request.get(ours), (int, float)):
            sampling[theirs] = request[ours]
    params.update(sampling)
    return params


def _verifier_fields(task: Task) -> dict[str, Any]:
    return {k: v for k, v in task.metadata.items() if k not in _RESERVED and k not in _INTERNAL_META
            and not k.startswith("_ng_")}


def _agent_ref(task: Task, rollout: Rollout) -> dict[str, Any]:
    ref = task.metadata.get("nemo_gym_agent_ref")
    return dict(ref) if isinstance(ref, dict) and ref.get("name") else {"name": rollout.agent or task.env}


def materialized_row(task: Task, index: int, repeat: int, rollout: Rollout) -> dict[str, Any]:
    """The input row NeMo Gym's profiler aligns a result with (itself a valid NeMo Gym task row)."""
    return {**_verifier_fields(task), "responses_create_params": create_params(task, rollout),
            "agent_ref": _agent_ref(task, rollout), "id": task.metadata.get("nemo_gym_original_id", task.id),
            TASK_INDEX: index, ROLLOUT_INDEX: repeat}  # a repeated id the row loader made unique: the row's own


def result_record(task: Task, index: int, rollout: Rollout) -> dict[str, Any]:
    """One NeMo Gym verify response for a scored rollout."""
    verdict = rollout.verdict
    assert verdict is not None
    traj = rollout.trajectory
    usage = {"input_tokens": rollout.usage.prompt_tokens,
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": rollout.usage.completion_tokens,
             "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": rollout.usage.prompt_tokens + rollout.usage.completion_tokens}
    params = create_params(task, rollout)
    groups = turn_groups(rollout, _prompt_length(traj.messages))
    response = {"id": f"resp_{rollout.rollout_id}", "object": "response", "created_at": float(rollout.started_at),
                "model": rollout.model, "output": [item for _, items in groups for item in items],
                "parallel_tool_calls": params.get("parallel_tool_calls") is not False,
                "tool_choice": params.get("tool_choice") or "auto", "tools": params.get("tools") or [], "usage": usage,
                "status": "completed", "error": None, "incomplete_details": None, "instructions": None,
                "metadata": None, "temperature": params.get("temperature"), "top_p": params.get("top_p")}
    record: dict[str, Any] = {**_verifier_fields(task), "responses_create_params": params, "response": response,
                              "reward": float(verdict.reward), "mask_sample": False}
    if verdict.components:
        record["reward_components"] = {k: float(v) for k, v in verdict.components.items()}
        for name, value in verdict.components.items():
            record.setdefault(name, float(value))
    record.setdefault("passed", verdict.is_pass())
    if verdict.answer is not None:
        record.setdefault("extracted_answer", verdict.answer)  # what NeMo Gym's majority@k reads
    record.update({"id": task.id, "agent_ref": _agent_ref(task, rollout), TASK_INDEX: index,
                   ROLLOUT_INDEX: rollout.repeat, ATTEMPT_INDEX: rollout.attempt,
                   "palaestra_rollout_id": rollout.rollout_id})
    asked = params.get("input")
    prompt = [{"role": "user", "content": asked, "type": "message"}] if isinstance(asked, str) else \
        [it for it in asked or [] if isinstance(it, dict)]
    record.update(observability(rollout, record, prompt, groups, list(params.get("tools") or [])))
    return record


def failure_record(task: Task, index: int, rollout: Rollout) -> dict[str, Any]:
    return {"id": task.id, "agent_ref": _agent_ref(task, rollout), TASK_INDEX: index, ROLLOUT_INDEX: rollout.repeat,
            ATTEMPT_INDEX: rollout.attempt,
            "_ng_failure_class": f"palaestra_{rollout.outcome.kind or rollout.outcome.status}",
            "_ng_failure_message": rollout.outcome.message or rollout.outcome.status,
            "palaestra_rollout_id": rollout.rollout_id}


def _final_attempts(records: list[dict[str, Any]]) -> dict[tuple[str, int], Rollout]:
    """Per (task, repeat): the scored attempt if any, else the last attempt (the journal is append-only)."""
    best: dict[tuple[str, int], Rollout] = {}
    for raw in records:
        r = Rollout.model_validate(raw)
        key = (r.task_id, r.repeat)
        old = best.get(key)
        if old is None or old.outcome.status != "scored" or r.outcome.status == "scored":
            best[key] = r
    return best


def _dump(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("wb") as fh:
        for row in rows:
            fh.write(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS) + b"\n")


def export_nemo_gym(run_dir: str | Path, out: str | Path) -> NemoGymExport:
    """Write the run at ``run_dir`` as NeMo Gym rollouts at ``out`` (plus its two sibling files)."""
    from palaestra.rollout.journal_read import read_journal
    from palaestra.rollout.rundir import JOURNAL, TASKS
    from palaestra.rollout.tasks import read_tasks

    run, dest = Path(run_dir), Path(out)
    if not (run / JOURNAL).is_file() or not (run / TASKS).is_file():
        raise InvalidTask(f"{run} is not a run directory (no {JOURNAL} or {TASKS})",
                          hint="give the directory `palaestra eval run --out` wrote")
    tasks = read_tasks(run / TASKS)
    index = {t.id: i for i, t in enumerate(tasks)}
    by_id = {t.id: t for t in tasks}
    records, _ = read_journal(run / JOURNAL)
    from palaestra.rollout.expand import expand_records

    records = expand_records(records, by_id)  # compact records reference their task's input: make them whole
    results, inputs, failures = [], [], []
    skipped: list[str] = []
    for (task_id, repeat), rollout in sorted(_final_attempts(records).items(),
                                             key=lambda kv: (index.get(kv[0][0], -1), kv[0][1])):
        task = by_id.get(task_id)
        if task is None:
            skipped.append(task_id)
            continue
        inputs.append(materialized_row(task, index[task_id], repeat, rollout))
        if rollout.outcome.status == "scored" and rollout.verdict is not None:
            results.append(result_record(task, index[task_id], rollout))
        else:
            failures.append(failure_record(task, index[task_id], rollout))
    dest.parent.mkdir(parents=True, exist_ok=True)
    _dump(dest, results)
    mat = sibling(dest, "_materialized_inputs")
    _dump(mat, inputs)
    fail_path = sibling(dest, "_failures") if failures else None
    if fail_path is not None:
        _dump(fail_path, failures)
    return NemoGymExport(dest, mat, fail_path, scored=len(results), failed=len(failures), skipped_tasks=skipped)
