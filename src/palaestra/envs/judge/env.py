"""``judge``: free-form answers graded by an LLM judge through any model endpoint.

Absolute mode asks the judge for a 0-10 score against a rubric, key points and a reference answer;
pairwise mode asks which of two answers is better, in both orders, so a judge that favours a position
cannot decide the outcome. A judge that is unreachable or keeps answering in an unreadable form is an
infrastructure failure (``InfraError("judge")``, the rollout is ``failed(judge)`` and retried), never a
score of 0.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InfraError, InvalidTask, PalaestraError
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.core.secrets import redact_url
from palaestra.envs.judge import judges
from palaestra.models.base import CallContext, ModelBackend

BUILTIN = "builtin:reference-match"
ENV_MODEL = "PALAESTRA_JUDGE_MODEL"
ENV_MODEL_NAME = "PALAESTRA_JUDGE_MODEL_NAME"
ENV_KEY_VAR = "PALAESTRA_JUDGE_API_KEY_ENV"
OUTCOME_SCORE = {"win": 1.0, "loss": 0.0}


def _question(task: Task) -> str:
    users = [m for m in task.messages() if m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class Judge(Environment):
    """Free-form answers scored by a judge model (absolute 0-10, or pairwise against a baseline)."""

    name = "judge"
    version = "0.1"
    description = "Free-form answers graded by an LLM judge (rubric score, or pairwise with order swap)."
    domain = "open-ended"
    mechanism = "judge"

    def __init__(self, judge: str | ModelBackend | None = None, *, judge_model_name: str | None = None,
                 retries: int = 2, max_concurrency: int = 16, timeout_s: float = 120.0) -> None:
        """``judge``: a model spec (``http://127.0.0.1:8000/v1``, ``scripted:constant?text=...``,
        ``builtin:reference-match``) or a backend object. Without one, ``$PALAESTRA_JUDGE_MODEL``, then
        the task's ``metadata.judge_model``, then the offline reference-match judge."""
        self._judge = judge
        self._model_name = judge_model_name
        self.retries = retries
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self._backends: dict[tuple[str, str | None], tuple[Any, ModelBackend]] = {}
        self._limit: tuple[Any, asyncio.Semaphore] | None = None

    # ---- which judge -------------------------------------------------------------------------------
    def judge_spec(self, task: Task) -> str | ModelBackend:
        if self._judge is not None:
            return self._judge
        return os.environ.get(ENV_MODEL) or str(task.metadata.get("judge_model") or "") or BUILTIN

    def _backend(self, task: Task) -> tuple[str, ModelBackend]:
        spec = self.judge_spec(task)
        if not isinstance(spec, str):
            return getattr(spec, "name", type(spec).__name__), spec
        model = self._model_name or os.environ.get(ENV_MODEL_NAME) or task.metadata.get("judge_model_name")
        loop = asyncio.get_running_loop()
        cached = self._backends.get((spec, model))
        if cached is not None and cached[0] is loop:
            return redact_url(spec), cached[1]
        backend: ModelBackend
        if spec == BUILTIN:
            backend = judges.ReferenceMatchJudge()
        else:
            from palaestra.models.factory import make_backend

            try:
                backend = make_backend(spec, model_name=model, timeout_s=self.timeout_s,
                                       api_key_env=os.environ.get(ENV_KEY_VAR, "OPENAI_API_KEY"),
                                       max_concurrency=self.max_concurrency)
            except PalaestraError as exc:
                raise InfraError("judge", f"cannot build the judge model {redact_url(spec)!r}: {exc}",
                                 hint=f"set {ENV_MODEL} (or metadata.judge_model) to a model URL or spec") from exc
        self._backends[(spec, model)] = (loop, backend)
        return redact_url(spec), backend

    async def aclose(self) -> None:
        """Close the judge backends this environment opened (their HTTP connection pools)."""
        backends, self._backends = self._backends, {}
        for _, backend in backends.values():
            await backend.aclose()

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._limit is None or self._limit[0] is not loop:
            self._limit = (loop, asyncio.Semaphore(self.max_concurrency))
        return self._limit[1]

    # ---- tasks -------------------------------------------------------------------------------------
    def check_task(self, task: Task) -> None:
        meta = task.metadata
        mode = meta.get("mode", "absolute")
        if mode not in ("absolute", "pairwise"):
            raise InvalidTask(f"judge task '{task.id}': unknown metadata.mode {mode!r}",
                              hint="use absolute or pairwise")
        points = meta.get("key_points", [])

        def point_ok(p: Any) -> bool:
            return isinstance(p, str) or (isinstance(p, list) and bool(p) and all(isinstance(x, str) for x in p))

        if not isinstance(points, list) or not all(point_ok(p) for p in points):
            raise InvalidTask(f"judge task '{task.id}': metadata.key_points must be a list of strings "
                              "(or of lists of alternative strings)")
        if mode == "pairwise" and not isinstance(meta.get("reference_answer"), str):
            raise InvalidTask(f"judge task '{task.id}': pairwise mode needs metadata.reference_answer",
                              hint="the answer the model's answer is compared with")
        if mode == "absolute" and not (meta.get("reference_answer") or points or meta.get("rubric")):
            raise InvalidTask(f"judge task '{task.id}' gives the judge nothing to grade against",
                              hint="add metadata.rubric, metadata.key_points or metadata.reference_answer")

    async def _ask(self, task: Task, messages: list[dict[str, str]], job: dict[str, Any],
                   parse: Any) -> tuple[Any, str]:
        """One judgement: call the judge, parse its reply; retry failures and unreadable replies, then
        raise InfraError("judge")."""
        name, backend = self._backend(task)
        request = {"messages": messages, "temperature": 0.0, "max_tokens": 1024}
        last = ""
        for _ in range(self.retries + 1):
            try:
                async with self._semaphore():
                    response = await backend.chat(request, CallContext(task=task, extra={"judge": job}))
                text = str(response["choices"][0]["message"].get("content") or "")
            except Exception as exc:  # unreachable, HTTP error, malformed body: retry, then fail(judge)
                last = f"call failed: {type(exc).__name__}: {exc}"
                continue
            parsed = parse(text)
            if parsed is not None:
                return parsed, text
            last = f"unreadable reply: {text[:300]!r}"
        raise InfraError("judge", f"judge {name} failed {self.retries + 1} time(s) on task '{task.id}'; last: {last}",
                         hint=f"check that the judge is reachable and ends its reply as asked; set {ENV_MODEL}")

    async def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        self.check_task(state)
        meta = state.metadata
        answer = trajectory.final_text()
        mode = meta.get("mode", "absolute")
        if not answer.strip():
            return Verdict(reward=0.0, passed=False, components={"judge_score": 0.0},
                           metadata={"mode": mode, "reason": "empty_answer"})
        points = list(meta.get("key_points") or [])
        rubric = meta.get("rubric")
        question = _question(state)
        if mode == "absolute":
            messages = judges.absolute_messages(question, answer, reference=meta.get("reference_answer"),
                                                rubric=rubric, key_points=points)
            job = {"mode": "absolute", "answer": answer, "reference": meta.get("reference_answer"),
                   "key_points": points}
            score, reply = await self._ask(state, messages, job, judges.parse_score)
            threshold = float(meta.get("pass_threshold", 0.7))
            return Verdict(reward=score, passed=score >= threshold, components={"judge_score": score},
                           metadata={"mode": mode, "judge_reply": reply[-2000:]})
        baseline = str(meta["reference_answer"])
        orders = [(answer, baseline, {"A": "win", "B": "loss", "C": "tie"})]
        if meta.get("swap", True):
            orders.append((baseline, answer, {"A": "loss", "B": "win", "C": "tie"}))
        outcomes, replies = [], []
        for first, second, meaning in orders:
            messages = judges.pairwise_messages(question, first, second, rubric=rubric)
            job = {"mode": "pairwise", "answers": [first, second], "key_points": points}
            verdict, reply = await self._ask(state, messages, job, judges.parse_verdict)
            outcomes.append(meaning[verdict])
            replies.append(reply[-1000:])
        consistent = len(set(outcomes)) == 1
        outcome = outcomes[0] if consistent else "tie"
        reward = OUTCOME_SCORE.get(outcome, float(meta.get("tie_score", 0.5)))
        return Verdict(reward=reward, passed=outcome == "win", components={"preference": reward,
                                                                          "consistent": float(consistent)},
                       metadata={"mode": mode, "outcome": outcome, "orders": outcomes, "judge_replies": replies})

    def reference(self, task: Task) -> Reference | None:
        """The answer a perfect model gives: ``metadata.oracle_answer``, else (absolute mode) the
        reference answer itself."""
        meta = task.metadata
        answer = meta.get("oracle_answer")
        if not answer and meta.get("mode", "absolute") == "absolute":
            answer = meta.get("reference_answer")
        return Reference(final_answer=str(answer)) if answer else None
