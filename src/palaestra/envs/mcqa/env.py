"""``mcqa``: multiple-choice questions scored by the option letter the model commits to.

Accepts NeMo Gym mcqa rows as they are (options and expected answer at the top level, the question with
its options already in the messages, a ``grading_mode``), as well as plain rows whose options live in
``metadata.options`` and are rendered into the prompt here.
"""

from __future__ import annotations

import re
import threading
from typing import Any, ClassVar

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.mcqa import bunsen, nemo
from palaestra.envs.mcqa.extract import GRADING_MODES, extract
from palaestra.envs.mcqa.modes import by_output_regex
from palaestra.envs.mcqa.reading import Extraction, Options, normalize_options

_INSTRUCTION = "Answer with the letter of the correct option in \\boxed{}, e.g. \\boxed{A}."


def _field(task: Task, key: str) -> Any:
    """A metadata field, also looked up one level down (NeMo rows may nest it under ``metadata``)."""
    if key in task.metadata:
        return task.metadata[key]
    nested = task.metadata.get("metadata")
    return nested.get(key) if isinstance(nested, dict) else None


def _output_regex(task: Task) -> list[str]:
    """The row's ``template_metadata.output_regex`` patterns (NeMo Gym template rows), or none."""
    template = _field(task, "template_metadata")
    patterns = template.get("output_regex") if isinstance(template, dict) else None
    if patterns is None:
        return []
    return [patterns] if isinstance(patterns, str) else list(patterns)


# NeMo Gym servers whose rows mcqa grades by a rule of their own; any other row is read as ``mcqa``'s.
_OWN_READING = ("gpqa_diamond", "bunsenbench_chemistry_mcq")


def _nemo_server(task: Task) -> str:
    """The NeMo Gym resources server a row was written for: ``metadata.nemo_gym_resources_server``, else
    the one its ``agent_ref`` names (``gpqa_diamond`` rows carry ``grading_mode`` but are read by the
    gpqa_diamond server's own rule; BunsenBench's server has its own reader), else ``mcqa``."""
    named = _field(task, "nemo_gym_resources_server")
    if isinstance(named, str) and named:
        return named if named in _OWN_READING else "mcqa"
    ref = _field(task, "nemo_gym_agent_ref") or _field(task, "agent_ref")
    name = str(ref.get("name") or "") if isinstance(ref, dict) else ""
    return next((s for s in _OWN_READING if name == s or name.startswith(s + "_")), "mcqa")


# The metadata keys that change how ``verify`` reads a reply (``metadata`` nests any of them): a row with
# none of them is read with every one absent, without looking each up.
_READING_KEYS = frozenset(("metadata", "nemo_compat", "template_metadata", "grading_mode",
                           "nemo_gym_resources_server", "nemo_gym_agent_ref", "agent_ref"))


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
        plain = task.metadata.keys().isdisjoint(_READING_KEYS)  # then none of the NeMo Gym fields to check
        if not plain:
            self._check_nemo_fields(task)
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
        if not (len(letter) == 1 and "A" <= letter <= "Z") or (letters and letter not in letters):
            raise InvalidTask(
                f"mcqa task '{task.id}': expected_answer {expected!r} is not one of the option letters "
                f"{letters or 'A-Z'}",
                hint="set metadata.expected_answer to the letter of the correct option",
            )
        mode = "auto" if plain else _field(task, "grading_mode") or "auto"
        if mode not in GRADING_MODES:
            raise InvalidTask(
                f"mcqa task '{task.id}': unknown grading_mode {mode!r}",
                hint=f"use one of {', '.join(GRADING_MODES)}",
            )
        question = task.input  # read in place: ``task.messages()`` would copy every message to look at it
        if not (question.strip() if isinstance(question, str)
                else any(str(m.get("content") or "").strip() for m in question)):
            raise InvalidTask(f"mcqa task '{task.id}' has an empty input", hint="put the question in `input`")
        return options

    # check_task, seed, prompt and verify all need a task's normalized options. Sessions open and verify
    # on the same Task objects but interleaved (hundreds in flight), so results are kept by identity for
    # the last _MEMO_SIZE tasks; the Task is kept alongside so a recycled id() never matches. The memo is
    # shared by every instance of a class: a run checks each row once when it selects rows and again when
    # its session opens, on two instances (one per run, one per placement), and a check depends on the
    # task alone (``nemo_compat`` changes how a reply is read, never whether a task is valid or its
    # options). Keyed per class, so a subclass with its own check never reads another's result.
    _MEMO_SIZE = 8192
    _MEMOS: ClassVar[dict[type, dict[int, tuple[Task, Options]]]] = {}
    _MEMO_LOCK: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *, nemo_compat: bool = False) -> None:
        """``nemo_compat``: read replies exactly as NeMo Gym 0.7's mcqa / gpqa_diamond verifiers do
        (first ``Answer:``, ambiguous replies taken, see ``nemo.py``) for every task that does not set
        ``metadata.nemo_compat`` itself. Off by default: Palaestra's reading does not guess."""
        self.nemo_compat = nemo_compat
        with self._MEMO_LOCK:
            self._memo = self._MEMOS.setdefault(type(self), {})

    @staticmethod
    def _check_nemo_fields(task: Task) -> None:
        flag = _field(task, "nemo_compat")
        if flag is not None and not isinstance(flag, bool):
            raise InvalidTask(f"mcqa task '{task.id}': metadata.nemo_compat must be true or false, got {flag!r}")
        template = _field(task, "template_metadata")
        raw = template.get("output_regex") if isinstance(template, dict) else None
        if raw is None:
            return
        patterns = [raw] if isinstance(raw, str) else raw
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise InvalidTask(f"mcqa task '{task.id}': template_metadata.output_regex must be a regex or a "
                              f"list of regexes, got {raw!r}")
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidTask(
                    f"mcqa task '{task.id}': template_metadata.output_regex {pattern!r} is not a valid "
                    f"regular expression: {exc}",
                    hint="fix the pattern; its first group should capture the option letter",
                ) from None

    def _compat(self, task: Task) -> bool:
        flag = _field(task, "nemo_compat")
        return flag if isinstance(flag, bool) else self.nemo_compat

    def check_task(self, task: Task) -> None:
        hit = self._memo.get(id(task))
        if hit is None or hit[0] is not task:  # a task that failed is never kept: it fails again, by name
            self._remember(task, self._checked_options(task))

    def _remember(self, task: Task, options: Options) -> None:
        memo = self._memo
        with self._MEMO_LOCK:  # shared with other instances, which may run in other threads
            if len(memo) >= self._MEMO_SIZE:
                del memo[next(iter(memo))]  # the oldest first
            memo[id(task)] = (task, options)

    def _options(self, task: Task) -> Options:
        hit = self._memo.get(id(task))
        if hit is not None and hit[0] is task:
            return hit[1]
        options = self._checked_options(task)
        self._remember(task, options)
        return options

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
        if state.metadata.keys().isdisjoint(_READING_KEYS):  # a plain row: each of them would read as absent
            compat, patterns, nemo_default, mode, server = self.nemo_compat, [], self.nemo_compat, None, "mcqa"
        else:
            compat = self._compat(state)
            patterns = _output_regex(state)
            nemo_default = compat or _field(state, "template_metadata") is not None
            mode = _field(state, "grading_mode")
            server = _nemo_server(state)
        # No grading_mode: NeMo Gym's default (strict boxed) for NeMo Gym template rows and under
        # nemo_compat, Palaestra's `auto` for every other row.
        mode = str(mode or ("strict_single_letter_boxed" if nemo_default else "auto"))
        if compat:
            found = self._nemo_extract(state, trajectory.final_text(), options, mode, server)
        else:
            text = trajectory.final_text()
            found = (by_output_regex(text, patterns, options) if patterns and text.strip() else None) or extract(
                text, options, "boxed_or_answer_colon" if server == "gpqa_diamond" else mode)
        correct = found.letter == expected
        metadata: dict[str, Any] = {"grading_mode": mode, "expected_answer": expected}
        if server != "mcqa":
            metadata["read_as"] = server
        if compat:
            metadata["nemo_compat"] = True
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

    @staticmethod
    def _nemo_extract(task: Task, reply: str, options: Options, mode: str, server: str) -> Extraction:
        """What NeMo Gym's verifier for ``server`` extracts (``nemo_compat``)."""
        text = reply.strip()
        if not text:
            return Extraction(None, reason="empty_response")
        raw = _field(task, "options")
        # NeMo Gym's option letters: the keys of one-key dicts whose text is not null.
        letters = ({str(k).upper() for entry in raw if isinstance(entry, dict) for k, v in entry.items()
                    if v is not None and len(str(k)) == 1 and str(k).isalpha()}
                   if isinstance(raw, list) else {letter for letter, _ in options})
        if server == "bunsenbench_chemistry_mcq":  # its own reader; it never reads template_metadata
            gold = str(_field(task, "expected_answer")).strip().upper()
            letter = bunsen.read(text, [(ltr, t) for ltr, t in options if ltr in letters], letters | {gold})
            return Extraction(letter, method="nemo_bunsenbench", reason=None if letter else "no_answer_nemo_gym")
        patterns = _output_regex(task)
        letter = nemo.output_regex(text, patterns, options, letters) if patterns else None
        method = "nemo_output_regex"
        if letter is None:
            method = f"nemo_{server if server != 'mcqa' else mode}"
            if server == "gpqa_diamond":
                letter = nemo.gpqa(text, letters)
            elif mode == "strict_single_letter_boxed":
                letter = nemo.strict_boxed(text, letters)
            elif mode == "lenient_boxed":
                letter = nemo.lenient_boxed(text, options, letters)
            elif mode == "lenient_answer_colon":
                letter = nemo.answer_colon(text, options, letters)
            else:  # a mode NeMo Gym has not (auto, boxed_or_answer_colon): Palaestra's own reading
                return extract(text, options, mode)
        return Extraction(letter, method=method, reason=None if letter else "no_answer_nemo_gym")

    def reference(self, task: Task) -> Reference:
        expected = str(_field(task, "expected_answer")).strip().upper()
        return Reference(final_answer=f"\\boxed{{{expected}}}")
