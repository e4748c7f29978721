"""``reasoning_gym``: an adapter over the ``reasoning-gym`` library's procedural datasets.

A task names a dataset, a seed, an index (and optionally the dataset's config and size); the
environment regenerates that exact entry and scores the answer with the dataset's own scorer, so any
of the library's datasets can be evaluated without copying its data. A row whose question no longer
matches the regenerated one (a different library version) is rejected rather than scored wrongly.

A row may instead carry its entry (``metadata.entry``: ``question``, ``answer`` and the library's
``metadata`` with ``source_dataset``), as NeMo Gym's reasoning_gym rows do: it is then scored by the
scorer reasoning-gym registers for that ``source_dataset`` (``get_score_answer_fn``), on the entry as
given, and its prompt is the row's own.

``nemo_compat`` (constructor, or a row's ``metadata.nemo_compat``) reads the reply as NeMo Gym 0.7's
reasoning_gym server does (docs/nemo_gym_parity.md): the last ``<answer>`` pair in lower case only, else
the first ``\\boxed{...}`` without nested braces, else the whole reply, and the scorer runs even on an
empty answer. Off (the default), tags are read in any case and a box is no answer form of its own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.reasoning_gym.canonical import Canonical, ScoreError

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NEMO_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_NEMO_BOX = re.compile(r"\\boxed\{([^}]+)\}")


def nemo_answer(text: str) -> str:
    """The answer NeMo Gym's reasoning_gym server hands the scorer (possibly empty, never None)."""
    tags = _NEMO_TAG.findall(text)
    if tags:
        return str(tags[-1]).strip()
    box = _NEMO_BOX.search(text)
    return box.group(1).strip() if box else text.strip()


def extract_answer(text: str) -> str | None:
    """The last ``<answer>...</answer>``; without tags, the whole reply; None when empty."""
    found = _ANSWER.findall(text)
    answer = found[-1] if found else text
    answer = answer.strip()
    return answer or None


def _library() -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise InvalidTask("the reasoning_gym environment needs the 'reasoning-gym' package",
                          hint="pip install reasoning-gym") from exc
    return reasoning_gym


def library_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reasoning-gym")
    except PackageNotFoundError:
        return "not installed"


# Where generators leave a solution when the entry's ``answer`` is not one the scorer accepts.
_SOLUTION_KEYS = ("example_answer", "example_correct_answer", "possible_answer")


def candidates(item: dict[str, Any]) -> list[str]:
    """Reference candidates for an entry, best first (each is verified by the scorer before use)."""
    out = [] if item.get("answer") is None else [str(item["answer"])]
    found = item.get("metadata")
    inner: dict[str, Any] = found if isinstance(found, dict) else {}
    for key in _SOLUTION_KEYS:
        value = inner.get(key)
        if isinstance(value, str):
            out.append(value)
        elif value is not None:
            try:
                out.append(json.dumps(value))
            except (TypeError, ValueError):
                out.append(str(value))
    return out


@dataclass(frozen=True)
class _Regenerated:
    """Scores against a regenerated entry, in the process that generated it (see ``canonical``)."""

    canonical: Canonical
    recipe: tuple[str, int, int, dict[str, Any], int]

    @property
    def name(self) -> str:
        return self.recipe[0]

    def score_answer(self, answer: str, entry: dict[str, Any]) -> float:
        return self.canonical.score(*self.recipe, answer)


@dataclass(frozen=True)
class _Scorer:
    """The scorer reasoning-gym registers for one dataset name, in the dataset object's calling shape."""

    name: str
    fn: Any

    def score_answer(self, answer: str, entry: dict[str, Any]) -> float:
        try:
            return float(self.fn(answer=answer, entry=entry))
        except Exception as exc:
            raise ScoreError(f"{type(exc).__name__}: {exc}"[:300]) from None


def _carried(task: Task) -> tuple[_Scorer, dict[str, Any]]:
    entry = task.metadata.get("entry")
    inner = entry.get("metadata") if isinstance(entry, dict) else None
    name = inner.get("source_dataset") if isinstance(inner, dict) else None
    if not isinstance(entry, dict) or not isinstance(name, str) or entry.get("answer") is None:
        raise InvalidTask(f"reasoning_gym task '{task.id}': metadata.entry needs 'answer' and "
                          "metadata.source_dataset (the reasoning-gym dataset whose scorer grades it)",
                          hint='e.g. {"question": ..., "answer": ..., "metadata": {"source_dataset": "leg_counting"}}')
    rg = _library()
    try:
        fn = rg.get_score_answer_fn(name)
    except Exception as exc:
        raise InvalidTask(f"reasoning_gym task '{task.id}': reasoning-gym {library_version()} has no scorer for "
                          f"source_dataset {name!r} ({type(exc).__name__}: {exc})",
                          hint="check the dataset name (reasoning_gym.factory.DATASETS)") from None
    return _Scorer(name, fn), entry


class ReasoningGym(Environment):
    """Procedurally generated reasoning tasks, scored by reasoning-gym's own scorers."""

    name = "reasoning_gym"
    version = "0.1"
    description = "reasoning-gym datasets (generated from name, seed, index) scored by the library's scorers."
    domain = "reasoning"
    mechanism = "procedural"
    system_prompt = ("Think the problem through, then give only the final answer inside <answer></answer> tags, "
                     "following any answer format the question asks for.")

    def __init__(self, *, nemo_compat: bool = False) -> None:
        self._canonical: Canonical | None = None
        self.nemo_compat = nemo_compat

    # ---- generation --------------------------------------------------------------------------------
    @property
    def canonical(self) -> Canonical:
        """Generation and scoring independent of this process's hash seed (started on first use)."""
        if self._canonical is None:
            _library()
            self._canonical = Canonical()
        return self._canonical

    @staticmethod
    def recipe(task: Task) -> tuple[str, int, int, dict[str, Any], int]:
        """(dataset, seed, size, config, index) of a regenerated row, checked."""
        meta = task.metadata
        name, seed, index = meta.get("dataset"), meta.get("seed"), meta.get("index")
        if not isinstance(name, str) or not isinstance(seed, int) or not isinstance(index, int) or index < 0:
            raise InvalidTask(f"reasoning_gym task '{task.id}' needs metadata.dataset (str), seed (int) and "
                              "index (int >= 0)", hint='e.g. {"dataset": "leg_counting", "seed": 42, "index": 0}')
        config = meta.get("config") or {}
        if not isinstance(config, dict):
            raise InvalidTask(f"reasoning_gym task '{task.id}': metadata.config must be an object")
        size = int(meta.get("size") or index + 1)
        if index >= size:
            raise InvalidTask(f"reasoning_gym task '{task.id}': index {index} is not below size {size}")
        return name, seed, size, config, index

    def entry(self, task: Task) -> tuple[Any, dict[str, Any]]:
        """The scorer (anything with ``score_answer(answer, entry)``) and the entry a task points at:
        regenerated from (dataset, seed, index), or carried in ``metadata.entry``."""
        if "entry" in task.metadata:
            return _carried(task)
        recipe = self.recipe(task)
        return _Regenerated(self.canonical, recipe), self.canonical.entry(*recipe)

    @classmethod
    def generate_tasks(cls, dataset: str, size: int, seed: int, config: dict[str, Any] | None = None,
                       *, prefix: str | None = None) -> list[Task]:
        """Task rows for entries 0..size-1 of a dataset: the question as input, the recipe in metadata."""
        env = cls()
        config = dict(config or {})
        tasks = []
        for index in range(size):
            meta = {"dataset": dataset, "seed": seed, "index": index, "size": size, "config": config,
                    "reasoning_gym_version": library_version()}
            probe = Task(id="probe", input="", metadata=meta)
            _, item = env.entry(probe)
            tasks.append(Task(id=f"{prefix or 'rg-' + dataset}-s{seed}-{index:03d}", env=cls.name,
                              input=str(item["question"]), metadata=meta, tags=[dataset]))
        return tasks

    # ---- environment -------------------------------------------------------------------------------
    def check_task(self, task: Task) -> None:
        _, item = self.entry(task)
        if "entry" in task.metadata:
            return  # a carried entry is its own question
        question = task.input if isinstance(task.input, str) else None
        if question is not None and question.strip() and question.strip() != str(item["question"]).strip():
            raise InvalidTask(
                f"reasoning_gym task '{task.id}': the input differs from the question reasoning-gym "
                f"{library_version()} generates for {task.metadata.get('dataset')} seed "
                f"{task.metadata.get('seed')} index {task.metadata.get('index')}",
                hint="regenerate the rows with this library version (python -m palaestra.envs.reasoning_gym.generate)")

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """An empty input is filled with the generated question; a carried entry's row is sent as it is."""
        if "entry" in task.metadata:
            return task.messages()
        if isinstance(task.input, str) and not task.input.strip():
            _, item = self.entry(task)
            task = task.model_copy(update={"input": str(item["question"])})
        return super().prompt(task)

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        ds, item = self.entry(state)
        flag = state.metadata.get("nemo_compat")
        compat = flag if isinstance(flag, bool) else self.nemo_compat
        answer = nemo_answer(trajectory.final_text()) if compat else extract_answer(trajectory.final_text())
        dataset = ds.name
        meta: dict[str, Any] = {"dataset": dataset, **({"nemo_compat": True} if compat else {})}
        if answer is None:
            return Verdict(reward=0.0, passed=False, components={"score": 0.0},
                           metadata={**meta, "reason": "no_answer"})
        try:
            score = float(ds.score_answer(answer, item))
        except ScoreError as exc:  # the scorer choked on the model's text: a wrong answer, not an outage
            meta["scorer_error"] = str(exc)
            score = 0.0
        if not 0.0 <= score <= 1.0:
            raise VerifierError(f"reasoning-gym scorer of {dataset} returned {score}, not in [0, 1]")
        return Verdict(reward=score, passed=score >= 1.0, components={"score": score}, metadata=meta, answer=answer)

    def reference(self, task: Task) -> Reference | None:
        """The first candidate the dataset's own scorer gives full marks: the entry's ``answer``, else a
        solution the generator left in its metadata (``example_answer``, ``possible_answer``, ...).
        None when there is none: the dataset has no reference (``no_reference``), and the oracle skips it."""
        ds, item = self.entry(task)
        for candidate in candidates(item):
            try:
                if float(ds.score_answer(candidate, item)) >= 1.0:
                    return Reference(final_answer=f"<answer>{candidate}</answer>")
            except ScoreError:
                continue
        return None

    def close_all(self) -> None:
        """Stop the generation worker, if one was started."""
        if self._canonical is not None:
            self._canonical.close()
            self._canonical = None
