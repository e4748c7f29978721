"""``ifeval``: instruction following with constraints a program can verify (counts, keywords, format,
case, start and end phrases...). The reward is the fraction of constraints met, so partial compliance
is visible; ``passed`` is the strict all-constraints-met reading. With ``metadata.grading_mode: binary``
(NeMo Gym's instruction_following default) the reward is that strict reading: 1 only when all are met.

NeMo Gym's IFEval and IFBench instruction ids are constraint kinds too (``nemo_ids.py``); a row using an id
that needs a language model to check is refused at load, with the reason.

``nemo_compat`` (constructor, ``eval run --nemo-compat`` or a row's ``metadata.nemo_compat``) reads the ids
whose IFBench check differs from Palaestra's as NeMo Gym's IFBench server does (``nemo_ids.COMPAT``: keywords
counted as substrings, indentation in spaces only); the other ids have one reading.
"""

from __future__ import annotations

from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.ifeval import constraints as C
from palaestra.envs.ifeval import (
    ifbench_ids,  # noqa: F401  (registers the IFBench kinds)
    nemo_ids,
)
from palaestra.envs.ifeval.compose import compose


class IFEval(Environment):
    """Instruction following scored by verifiable constraints: reward = fraction satisfied."""

    name = "ifeval"
    version = "0.1"
    description = "Instruction following with verifiable constraints; reward = fraction of constraints met."
    domain = "instruction following"
    mechanism = "single-turn"

    def __init__(self, *, nemo_compat: bool = False) -> None:
        """``nemo_compat``: read replies as NeMo Gym's IFBench server does, for tasks that do not set
        ``metadata.nemo_compat`` themselves. Off by default: Palaestra's reading."""
        self.nemo_compat = nemo_compat

    def check_task(self, task: Task) -> None:
        items = task.metadata.get("constraints")
        if not isinstance(items, list) or not items:
            raise InvalidTask(
                f"ifeval task '{task.id}' has no metadata.constraints",
                hint='add a list like [{"kind": "word_count", "max": 50}, {"kind": "no_commas"}]',
            )
        for i, item in enumerate(items):
            why = nemo_ids.unsupported_reason(item.get("kind") if isinstance(item, dict) else None)
            if why:
                raise InvalidTask(f"ifeval task '{task.id}': metadata.constraints[{i}]: instruction "
                                  f"{item['kind']!r} is not graded here: it {why}",
                                  hint="drop the rows that use it, or grade them with NeMo Gym's own server")
            try:
                C.validate(item)
            except ValueError as exc:
                raise InvalidTask(f"ifeval task '{task.id}': metadata.constraints[{i}]: {exc}",
                                  hint="fix the constraint in the task file") from None
        ref = task.metadata.get("reference_answer")
        if ref is not None and not isinstance(ref, str):
            raise InvalidTask(f"ifeval task '{task.id}': metadata.reference_answer must be a string")
        flag = task.metadata.get("nemo_compat")
        if flag is not None and not isinstance(flag, bool):
            raise InvalidTask(f"ifeval task '{task.id}': metadata.nemo_compat must be true or false, got {flag!r}")
        mode = task.metadata.get("grading_mode")
        if mode is not None and mode not in ("binary", "fraction"):
            raise InvalidTask(f"ifeval task '{task.id}': metadata.grading_mode must be 'binary' or 'fraction', "
                              f"got {mode!r}")

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """Append the constraints, worded from their parameters, so the model reads exactly what is checked
        (unless ``metadata.instructions_in_prompt`` says the input already states them)."""
        messages = super().prompt(task)
        if task.metadata.get("instructions_in_prompt"):
            return messages
        self.check_task(task)
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users or not isinstance(messages[users[-1]].get("content"), str):
            return messages
        rules = "\n".join(f"- {C.describe(c)}" for c in task.metadata["constraints"])
        last = messages[users[-1]]
        messages[users[-1]] = {**last, "content": f"{last['content'].rstrip()}\n\nRequirements:\n{rules}"}
        return messages

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        self.check_task(state)
        text = trajectory.final_text()
        components: dict[str, float] = {}
        details: dict[str, str] = {}
        flag = state.metadata.get("nemo_compat")
        compat = flag if isinstance(flag, bool) else self.nemo_compat
        for i, constraint in enumerate(state.metadata["constraints"], 1):
            nemo_check = nemo_ids.COMPAT.get(constraint["kind"]) if compat else None
            if nemo_check is not None and text.strip():
                ok, detail = nemo_check(text, {k: v for k, v in constraint.items() if k != "kind"})
            else:
                ok, detail = C.check(constraint, text)
            key = f"{i}.{constraint['kind']}"
            components[key] = 1.0 if ok else 0.0
            if not ok:
                details[key] = detail
        met = sum(components.values())
        strict = state.metadata.get("grading_mode") == "binary"
        return Verdict(
            reward=float(met == len(components)) if strict else met / len(components),
            passed=met == len(components),
            components=components,
            metadata={"failed": details, "satisfied": int(met), "total": len(components),
                      **({"nemo_compat": True} if compat else {})},
        )

    def reference(self, task: Task) -> Reference | None:
        """The row's ``reference_answer``; without one, a reply composed to meet the constraints
        (``compose.py``), when one can be built that every constraint's check accepts."""
        answer = task.metadata.get("reference_answer")
        if not isinstance(answer, str) and isinstance(task.metadata.get("constraints"), list):
            answer = compose(task.metadata["constraints"])
        return Reference(final_answer=answer) if isinstance(answer, str) else None
