"""``mcqa``: multiple-choice questions scored by the option letter the model commits to.

Accepts NeMo Gym mcqa rows as they are (options and expected answer at the top level, the question with
its options already in the messages, a ``grading_mode``), as well as plain rows whose options live in
``metadata.options`` and are rendered into the prompt here.
"""

from __future__ import annotations

import re
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.mcqa.extract import GRADING_MODES, Options, extract, normalize_options

_INSTRUCTION = "Answer with the letter of the correct option in \\boxed{}, e.g. \\boxed{A}."


def _field(task: Task, key: str) -> Any:
    """A metadata field, also looked up one level down (NeMo rows may nest it under ``metadata``)."""
    if key in task.metadata:
        return task.metadata[key]
    nested = task.metadata.get("metadata")
    return nested.get(key) if isinstance(nested, dict) else None


def _squash(text: str) -> str:
    return " ".join(text.split()).lower()


class MCQA(Environment):
    """Multiple-choice question answering: reward 1 when the extracted letter is the expected one."""

    name = "mcqa"
    version = "0.1"
    description = "Multiple-choice questions; the answer letter is extracted from free text and compared."
    domain = "knowledge"
    mechanism = "single-turn"

    def _checked_options(self, task: Task) -> Options:
        expected = _field(task, "expected_answer")
        if expected is None:
            raise InvalidTask(
                f"mcqa task '{task.id}' has no metadata.expected_answer",
                hint="add the gold option letter, e.g. \"expected_answer\": \"C\"",
            )
        try:
            options = normalize_options(_field(task, "options"))
        except (ValueError, TypeError) as exc:
            raise InvalidTask(
                f"mcqa task '{task.id}': bad metadata.options: {exc}",
                hint='use [{"A": "text"}, {"B": "text"}], {"A": "text", ...} or ["text", ...]',
            ) from None
        letter = str(expected).strip().upper()
        letters = [ltr for ltr, _ in options]
        if not re.fullmatch(r"[A-Z]", letter) or (letters and letter not in letters):
            raise InvalidTask(
                f"mcqa task '{task.id}': expected_answer {expected!r} is not one of the option letters "
                f"{letters or 'A-Z'}",
                hint="set metadata.expected_answer to the letter of the correct option",
            )
        mode = _field(task, "grading_mode") or "auto"
        if mode not in GRADING_MODES:
            raise InvalidTask(
                f"mcqa task '{task.id}': unknown grading_mode {mode!r}",
                hint=f"use one of {', '.join(GRADING_MODES)}",
            )
        if not task.messages() or not any(str(m.get("content") or "").strip() for m in task.messages()):
            raise InvalidTask(f"mcqa task '{task.id}' has an empty input", hint="put the question in `input`")
        return options

    # check_task, seed, prompt and verify all need a task's normalized options. Sessions open and verify
    # on the same Task objects but interleaved (hundreds in flight), so results are kept by identity for
    # the last _MEMO_SIZE tasks; the Task is kept alongside so a recycled id() never matches.
    _MEMO_SIZE = 8192

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Task, Options]] = {}

    def check_task(self, task: Task) -> None:
        memo = self._memo
        if len(memo) >= self._MEMO_SIZE:
            del memo[next(iter(memo))]  # the oldest first
        memo[id(task)] = (task, self._checked_options(task))

    def _options(self, task: Task) -> Options:
        hit = self._memo.get(id(task))
        if hit is not None and hit[0] is task:
            return hit[1]
        self.check_task(task)
        return self._memo[id(task)][1]

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """Render lettered options under the question, unless the question already lists them."""
        messages = super().prompt(task)
        options = self._options(task)
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not options or not users:
            return messages
        last = messages[users[-1]]
        content = last.get("content")
        if not isinstance(content, str):
            return messages
        squashed = _squash(content)
        if all(_squash(text) in squashed for _, text in options):
            return messages
        listing = "\n".join(f"{letter}) {text}" for letter, text in options)
        messages[users[-1]] = {**last, "content": f"{content.rstrip()}\n\n{listing}\n\n{_INSTRUCTION}"}
        return messages

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        options = self._options(state)
        expected = str(_field(state, "expected_answer")).strip().upper()
        mode = str(_field(state, "grading_mode") or "auto")
        found = extract(trajectory.final_text(), options, mode)
        correct = found.letter == expected
        metadata: dict[str, Any] = {"grading_mode": mode, "expected_answer": expected}
        if found.letter is None:
            metadata["reason"] = found.reason
            if found.candidates:  # an ambiguous reply: the options it named, none of them taken
                metadata["candidates"] = list(found.candidates)
        else:
            metadata["extracted_by"] = found.method
            if not correct:
                metadata["reason"] = "wrong_option"
        return Verdict(
            reward=1.0 if correct else 0.0,
            passed=correct,
            components={"correct": 1.0 if correct else 0.0},
            metadata=metadata,
            answer=found.letter,
        )

    def reference(self, task: Task) -> Reference:
        expected = str(_field(task, "expected_answer")).strip().upper()
        return Reference(final_answer=f"\\boxed{{{expected}}}")
