"""The observability half of a NeMo Gym rollout record: ``ng_trajectory`` (schema 1.0) and
``ng_model_call_capture``, built from what Palaestra's journal recorded.

NeMo Gym's collector attaches both to every rollout when observability is on: the capture is what its
model server saw (one entry per model call: identity, dialect, status, finish reason, tokens, latency),
the trajectory is the rollout as turns (one per model call that answered), the model calls with their
requests and responses, the tool calls with their timings, and one root agent invocation holding the
whole conversation. Its health checks, ``ng_perf`` summary and ATIF export read them; an exported
Palaestra run carries them so those tools work on it as on a run NeMo Gym collected.

Why each choice:

- Ids follow NeMo Gym's own derivation (rollout id ``"{task}-{rollout}"``, ``-a{n}`` for a retry; task id
  the row's ``task_id``/``problem_id``/``instance_id`` else the task index), so its collector, which
  re-derives them from the row, finds no identity mismatch.
- A model call's request and response are written in the Responses dialect, whatever the backend
  spoke: that is the dialect NeMo Gym's own agents use, its turn builder reads ``output`` items, and the
  token ids (``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``) sit on the turn's
  last output item, where NeMo Gym's model server puts them for training.
- Only facts the journal has: a failed model call is a model call without a response (not a turn), and
  what was not observed (token ids from a backend that gave none) is left out, never made up.
"""

from __future__ import annotations

from typing import Any

from palaestra.core.records import ModelCallRecord, Rollout

TRAJECTORY_KEY = "ng_trajectory"
CAPTURE_KEY = "ng_model_call_capture"
_TOKEN_KEYS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


def nemo_rollout_id(task_index: int, repeat: int, attempt: int) -> str:
    """NeMo Gym's capture key for a (task, rollout, attempt): ``"{task}-{rollout}"``, ``-a{n}`` when n > 0."""
    return f"{task_index}-{repeat}" + (f"-a{attempt}" if attempt > 0 else "")


def nemo_task_id(record: dict[str, Any], task_index: int) -> str:
    """The task id NeMo Gym's collector derives from a row (its first identity field, else the index)."""
    for key in ("task_id", "problem_id", "instance_id"):
        if record.get(key) is not None:
            return str(record[key])
    return str(task_index)


def _bare(item: dict[str, Any]) -> dict[str, Any]:
    """A conversation item without the training-only token fields (an invocation's conversation is the
    model-visible exchange; token ids live on the model call's response), its ``type`` stated (a
    Responses input message may omit it; NeMo Gym's trajectory readers want it)."""
    bare = {k: v for k, v in item.items() if k not in _TOKEN_KEYS}
    if "role" in bare and "type" not in bare:
        bare = {"type": "message", **bare}
    return bare


def _finish_reason(call: ModelCallRecord) -> str | None:
    response = call.response if isinstance(call.response, dict) else {}
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    for key in ("stop_reason",):
        if isinstance(response.get(key), str):
            return str(response[key])
    return "stop" if call.response is not None and call.error is None else None


def _tokens(call: ModelCallRecord) -> tuple[int | None, int | None, int | None]:
    usage = call.usage or {}
    got_in, got_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    total = usage.get("total_tokens")
    if total is None and got_in is not None and got_out is not None:
        total = got_in + got_out
    return got_in, got_out, total


def _capture_call(call: ModelCallRecord, index: int, call_id: str, response_id: str, invocation: str,
                  model: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``ng_model_call_capture.calls`` entry (NeMo Gym's capture record, payloads left out as its
    collector leaves them out once ``ng_trajectory`` holds them)."""
    got_in, got_out, total = _tokens(call)
    answered = call.response is not None and call.error is None
    reasoning = [s.get("text", "") for it in output if it.get("type") == "reasoning" for s in it.get("summary", [])]
    return {"model_call_id": call_id, "response_id": response_id if answered else None,
            "client_session_id": invocation, "call_index": index, "model_ref": None,
            "model": call.routed_to or model, "dialect": call.api, "status_code": call.status,
            "response_status": "completed" if answered else "failed", "finish_reason": _finish_reason(call),
            "upstream_attempted": True, "response_source": "upstream", "upstream_status_code": call.status,
            "local_response_reason": None, "started_at": call.started or None,
            "completed_at": (call.started + call.latency_s) if call.started else None,
            "tokens_in": got_in, "tokens_out": got_out, "tokens_reasoning": None, "tokens_total": total,
            "tool_calls": [{"id": it["call_id"], "name": it["name"], "arguments": it["arguments"]}
                           for it in output if it.get("type") == "function_call"],
            "reasoning_content": "".join(reasoning) or None, "cache_hit": None, "cached_tokens": None,
            "cache_creation_tokens": None, "error_category": None if answered else "model",
            "latency_total_ms": call.latency_s * 1000.0, "latency_ttft_ms": None}


def _metrics(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """NeMo Gym's per-rollout capture metrics: sums over the calls that report each value."""
    def total(key: str) -> float | None:
        values = [c[key] for c in calls if c.get(key) is not None]
        return sum(values) if values else None

    return {"tokens_in": total("tokens_in"), "tokens_out": total("tokens_out"),
            "tokens_reasoning": total("tokens_reasoning"), "tokens_total": total("tokens_total"),
            "cached_tokens": total("cached_tokens"), "latency_total_ms": total("latency_total_ms"),
            "num_calls": len(calls)}


def _tool_calls(rollout: Rollout, invocation: str, conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool execution with its timing, joined to the conversation's function calls by call id
    (by order for a tool record that kept none)."""
    calls = [it for it in conversation if it.get("type") == "function_call"]
    outputs = {it["call_id"]: it.get("output") for it in conversation if it.get("type") == "function_call_output"}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tc in enumerate(rollout.trajectory.tool_calls):
        call_id = tc.call_id or (calls[i]["call_id"] if i < len(calls) else f"tool_{i}")
        if call_id in seen:
            call_id = f"{call_id}#{i}"
        seen.add(call_id)
        failed = tc.status == "error"
        out.append({"kind": "tool_call", "invocation_id": invocation, "tool_call_id": call_id, "sandbox_id": None,
                    "tool_name": tc.name, "started_at": tc.started or None,
                    "completed_at": (tc.started + tc.duration_s) if tc.started else None,
                    "duration_ms": tc.duration_s * 1000.0, "timing_source": "harness",
                    "status": "failed" if failed else "completed",
                    "error_type": str((tc.error or {}).get("kind", "tool_error")) if failed else None,
                    "output": outputs.get(call_id, tc.output)})
    return out


def observability(rollout: Rollout, record: dict[str, Any], prompt: list[dict[str, Any]],
                  groups: list[tuple[str, list[dict[str, Any]]]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"ng_trajectory": ..., "ng_model_call_capture": ...}`` for one exported rollout record.

    ``prompt`` is the request's input items, ``groups`` the conversation after it as
    ``nemo_gym.turn_groups`` gives it, ``tools`` the request's Responses tools."""
    index, repeat, attempt = record["_ng_task_index"], record["_ng_rollout_index"], rollout.attempt
    rollout_id = nemo_rollout_id(index, repeat, attempt)
    task_id = nemo_task_id(record, index)
    invocation = f"{rollout_id}-agent"
    model_turns = [items for kind, items in groups if kind == "model"]
    history: list[dict[str, Any]] = [_bare(it) for it in prompt]
    calls_out: list[dict[str, Any]] = []
    capture: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    steps, turn_no = 0, 0
    pending = iter(groups)
    model_calls = rollout.trajectory.model_calls
    answered_calls = 0
    for k, call in enumerate(model_calls):
        answered = call.response is not None and call.error is None
        output: list[dict[str, Any]] = []
        if answered:  # the n-th answered call made the n-th assistant turn; a failed call made none
            output = model_turns[answered_calls] if answered_calls < len(model_turns) else []
            answered_calls += 1
            for kind, items in pending:  # the conversation up to this turn
                if kind == "model":
                    break
                history.extend(_bare(it) for it in items)
        request = {"model": rollout.model, "input": list(history), "tools": tools}
        call_id, response_id = f"{rollout_id}-call-{k}", f"resp_{rollout.rollout_id}_{k}"
        got_in, got_out, total = _tokens(call)
        response = {"id": response_id, "object": "response", "model": call.routed_to or rollout.model,
                    "status": "completed", "output": output,
                    "usage": {"input_tokens": got_in, "output_tokens": got_out, "total_tokens": total}} \
            if answered else None
        ref = {"model_call_id": call_id, "model_ref": None, "response_id": response_id if answered else None}
        refs.append(ref)
        calls_out.append({"model_call_id": call_id, "started_at": call.started or None,
                          "completed_at": (call.started + call.latency_s) if call.started else None,
                          "duration_ms": call.latency_s * 1000.0, "request": request, "response": response,
                          "response_metadata": {"response_id": ref["response_id"], "model": rollout.model,
                                                "dialect": "responses", "status_code": call.status,
                                                "response_status": "completed" if answered else "failed",
                                                "finish_reason": _finish_reason(call),
                                                "response_source": "upstream"},
                          "token_stats": {"prompt_tokens": got_in, "completion_tokens": got_out,
                                          "reasoning_tokens": None, "total_tokens": total, "cached_tokens": None}})
        capture.append(_capture_call(call, k, call_id, response_id, invocation, rollout.model, output))
        if answered:
            turn_no += 1
            # cumulative tool calls *including* this turn's: what NeMo Gym's strict ATIF exporter checks
            # (its collector's own turn builder counts the ones before; the field says "cumulative")
            steps += sum(1 for it in output if it.get("type") == "function_call")
            reasoning = [it for it in output if it.get("type") == "reasoning"]
            turns.append({"invocation_id": invocation, "task_id": task_id, "rollout_id": rollout_id,
                          "turn_no": turn_no, "timestamp": call.started or rollout.started_at,
                          "question": list(history), "answer": [_bare(it) for it in output if it not in reasoning],
                          "reasoning_content": [_bare(it) for it in reasoning] or None, "resolved": None,
                          "step_count": steps, "model_calls": [ref]})
        history.extend(_bare(it) for it in output)
    for _, items in pending:  # what came after the last model call (tool outputs, a final answer)
        history.extend(_bare(it) for it in items)
    if turns and rollout.verdict is not None:
        turns[-1]["resolved"] = rollout.verdict.is_pass()
    agent_s = rollout.timings.get("agent_s")
    root = {"kind": "agent_invocation", "invocation_id": invocation, "parent_invocation_id": None,
            "spawned_by_tool_call_id": None,
            "status": "completed" if rollout.outcome.status == "scored" else "failed",
            "duration_ms": agent_s * 1000.0 if isinstance(agent_s, (int, float)) else None,
            "error_type": None if rollout.outcome.status == "scored" else (rollout.outcome.kind or "failed"),
            "model_calls": refs, "conversation": history}
    gaps = [] if model_calls else [{"code": "model_calls_unavailable", "invocation_id": None, "detail": None}]
    trajectory = {"schema_version": "1.0", "task_id": task_id, "rollout_id": rollout_id, "invocations": [root],
                  "turns": turns, "model_calls": calls_out,
                  "tool_calls": _tool_calls(rollout, invocation, history), "gaps": gaps}
    return {TRAJECTORY_KEY: trajectory,
            CAPTURE_KEY: {"rollout_id": rollout_id, "metrics": _metrics(capture), "calls": capture}}
