"""What a perfect agent answers to a NeMo Gym row, where the row itself says it.

The scripted oracle replays an environment's ``reference``; for ``nemo_gym:<server>`` environments that
reference comes from here. Only rows that carry their answer get one: a field the server's own verifier
compares against (``expected_answer``, ``ground_truth``, ``label``, ...), written in the form the
server's prompts ask for (``\\boxed{}`` for the math servers, an ``Answer:`` line for the option
servers). A row without such a field gets no reference, so the oracle sends its fixed reply and the
server's verify still answers a real verdict (usually reward 0): the bench reports which of the two
policies each family ran under (``reference_policy``).

Nothing here imports NeMo Gym: the references are read from the rows alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from palaestra.core.records import Reference, Task, ToolCall
from palaestra.models.scripted import content_text

# Row fields that hold the answer a verifier compares with, in the order they are tried.
ANSWER_FIELDS = ("expected_answer", "ground_truth", "expected_output", "gold_answer", "answer", "label",
                 "target", "expected_result", "translation", "reference")
FIXED_REPLY = "fixed reply"  # what ``reference_policy`` says where no reference is derivable
# An action the prompt shows in the tag form its server parses (``<action>Up</action>``): the first one is
# the fixed reply of a row with no answer, so a game server gets a move it can apply rather than a 400.
_SHOWN_ACTION = re.compile(r"<action>\s*([^<>\n]{1,40}?)\s*</action>")


def _session_state(task: Task) -> Reference:
    """``example_session_state_mgmt``: the counter starts at ``initial_count`` and must end at
    ``expected_count``; one increment by the difference, then a read, reaches it."""
    start, goal = int(task.metadata["initial_count"]), int(task.metadata["expected_count"])
    return Reference(tool_calls=[ToolCall(name="increment_counter", arguments={"count": goal - start}),
                                 ToolCall(name="get_counter_value", arguments={})],
                     final_answer=str(goal))


def _ground_truth_calls(task: Task) -> Reference:
    """``workplace_assistant``: the row's ``ground_truth`` is the list of tool calls that solve it."""
    calls = [ToolCall(name=str(c["name"]), arguments=orjson.loads(c["arguments"])
                      if isinstance(c.get("arguments"), str) else c.get("arguments") or {})
             for c in task.metadata.get("ground_truth") or []]
    return Reference(tool_calls=calls, final_answer="Done.")


def _boxed(text: str) -> str:
    return f"The answer is \\boxed{{{text}}}."


def _answer_line(text: str) -> str:
    return f"Answer: {text}"


def _scicode_steps(task: Task) -> Reference:
    """SciCode's agent asks for one sub-step per model call, each in a fresh prompt: the reply is every
    sub-step's ``ground_truth_code`` in one ```python block, so each sub-step's solution defines its function
    (the later ones are defined, not called, which the tests do not mind)."""
    steps = task.metadata.get("sub_steps")
    steps = steps if isinstance(steps, list) else []
    codes = [str(s.get("ground_truth_code") or "") for s in steps if isinstance(s, dict)]
    return Reference(final_answer="```python\n" + "\n\n".join(c for c in codes if c) + "\n```")


# Server name → a reference built from the whole row (tools and state), where the answer is not one field.
CUSTOM: dict[str, Callable[[Task], Reference]] = {
    "scicode": _scicode_steps,
    "example_session_state_mgmt": _session_state,
    "workplace_assistant": _ground_truth_calls,
}
# Server name → how the answer field is written in the reply its verifier reads (default: as it is).
FORMATS: dict[str, Callable[[str], str]] = {
    **{s: _boxed for s in ("math_with_judge", "math_with_autograder", "polymath", "physics_judge",
                           "ugphysics_judge", "math_advanced_calculations", "equivalence_rule", "ns_tools",
                           "imo_gradingbench", "math_with_code")},
    **{s: _answer_line for s in ("mcqa", "gpqa_diamond", "swerl_llm_judge", "terminus_judge")},
}


def _as_text(value: Any) -> str | None:
    """The answer as reply text: strings as they are, numbers and structures as JSON; None for nothing."""
    if value is None or value == "" or value == [] or value == {}:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    return orjson.dumps(value).decode()


def answer_field(task: Task) -> str | None:
    """The first of ``ANSWER_FIELDS`` the row carries with a value."""
    for name in ANSWER_FIELDS:
        if _as_text(task.metadata.get(name)) is not None:
            return name
    return None


def shown_action(task: Task) -> str | None:
    """The first ``<action>...</action>`` the row's prompt shows as the reply format, or None."""
    for message in task.messages():
        found = _SHOWN_ACTION.search(content_text(message.get("content")))
        if found is not None:
            return f"<action>{found.group(1)}</action>"
    return None


def reference(server: str, task: Task) -> Reference | None:
    """The reference of a ``nemo_gym:<server>`` row, or None where the row does not determine one. A row
    without an answer whose prompt shows an action format gets that action (a valid move, not a solution)."""
    custom = CUSTOM.get(server)
    if custom is not None:
        return custom(task)
    field = answer_field(task)
    if field is None:
        action = shown_action(task)
        return Reference(final_answer=action) if action is not None else None
    text = _as_text(task.metadata[field])
    assert text is not None
    return Reference(final_answer=FORMATS.get(server, lambda s: s)(text))


def reference_policy(server: str, task: Task) -> str:
    """Which policy the oracle runs a row under: ``reference: <how>`` or ``fixed reply``."""
    if server in CUSTOM:
        if server == "scicode":
            return "reference: sub_steps[].ground_truth_code"
        return "reference: the row's tool calls" if server == "workplace_assistant" else "reference: row state"
    field = answer_field(task)
    if field is None and shown_action(task) is not None:
        return f"{FIXED_REPLY}: the prompt's first action"
    return f"reference: {field}" if field is not None else FIXED_REPLY
