"""``judge``: free-form answers graded by an LLM judge through any model endpoint.

Absolute mode asks the judge for a 0-10 score against a rubric, key points and a reference answer;
pairwise mode asks which of two answers is better, in both orders, so a judge that favours a position
cannot decide the outcome. Every verdict says who judged (``metadata.judge``: kind, model, endpoint,
prompt hash), and so does run.json. There is no silent default: without a judge model the run refuses
to start (``preflight``), and a rollout that gets this far anyway is failed(judge) with how to set one.
The offline keyword matcher grades only when asked for by name (``judge=keyword``) and is labelled as
such. A judge that is unreachable or keeps answering in an unreadable form is an infrastructure failure
(``InfraError("judge")``, the rollout is ``failed(judge)`` and retried), never a score of 0.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, InfraError, InvalidTask, PalaestraError
from palaestra.core.grading import GradingProbe
from palaestra.core.records import Reference, Rollout, Task, Trajectory, Verdict
from palaestra.core.secrets import redact_url
from palaestra.envs.judge import judges
from palaestra.models.base import CallContext, ModelBackend

KEYWORD = "keyword"
# Names that ask for the offline keyword matcher (the second one is its name from before it was opt-in).
KEYWORD_NAMES = frozenset({KEYWORD, "builtin:keyword", "builtin:reference-match"})
BUILTIN = "builtin:reference-match"
ENV_MODEL = "PALAESTRA_JUDGE_MODEL"
ENV_MODEL_NAME = "PALAESTRA_JUDGE_MODEL_NAME"
ENV_KEY_VAR = "PALAESTRA_JUDGE_API_KEY_ENV"
OUTCOME_SCORE = {"win": 1.0, "loss": 0.0}
NO_JUDGE_HINT = (f"set --judge-model or {ENV_MODEL} to the judge's OpenAI-compatible base URL (e.g. "
                 f"http://127.0.0.1:8000/v1; --judge-model-name or {ENV_MODEL_NAME} for its model name), give each "
                 "row metadata.judge_model, or build "
                 f"Judge(judge=URL); {ENV_MODEL}={KEYWORD} (or metadata.judge_model: {KEYWORD}) asks for the "
                 "offline keyword matcher, which is no LLM judge")


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
                 judge_api_key_env: str | None = None, retries: int = 2, max_concurrency: int = 16,
                 timeout_s: float = 120.0) -> None:
        """``judge``: a model spec (``http://127.0.0.1:8000/v1``, ``scripted:constant?text=...``, or
        ``keyword`` for the offline keyword matcher) or a backend object; a run passes its
        ``judge_model`` setting (``--judge-model``, ``$PALAESTRA_JUDGE_MODEL``) here. Without one, the
        task's ``metadata.judge_model``; without any, there is no judge, and grading refuses (never a
        silent fallback). ``judge_api_key_env``: the variable holding the judge's key (OPENAI_API_KEY)."""
        self._judge = judge
        self._model_name = judge_model_name
        self._api_key_env = judge_api_key_env or "OPENAI_API_KEY"
        self.retries = retries
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self._backends: dict[tuple[str, str | None], tuple[Any, ModelBackend]] = {}
        self._limit: tuple[Any, asyncio.Semaphore] | None = None

    # ---- which judge -------------------------------------------------------------------------------
    def judge_spec(self, task: Task) -> str | ModelBackend | None:
        """The configured judge for ``task``, or None when nothing names one."""
        if self._judge is not None:
            return self._judge
        return str(task.metadata.get("judge_model") or "") or None

    def _model_name_for(self, task: Task) -> str | None:
        name = self._model_name or task.metadata.get("judge_model_name")
        return str(name) if name else None

    def describe(self, task: Task) -> dict[str, Any]:
        """Who grades ``task``: ``kind`` (``model`` or ``keyword``), ``model``, ``endpoint`` (credentials
        redacted) and ``prompt_hash`` (judges.PROMPT_HASH). Raises ConfigError when no judge is set."""
        spec = self.judge_spec(task)
        if spec is None:
            raise ConfigError(f"judge task '{task.id}': no judge model is configured", hint=NO_JUDGE_HINT)
        if isinstance(spec, str) and spec.strip() in KEYWORD_NAMES:
            return {"kind": "keyword", "model": None, "endpoint": None, "prompt_hash": judges.PROMPT_HASH,
                    "note": "offline keyword matcher (key points / reference found in the answer), not an LLM"}
        if isinstance(spec, str):
            return {"kind": "model", "model": self._model_name_for(task), "endpoint": redact_url(spec),
                    "prompt_hash": judges.PROMPT_HASH}
        if isinstance(spec, judges.KeywordJudge):
            return {"kind": "keyword", "model": None, "endpoint": None, "prompt_hash": judges.PROMPT_HASH,
                    "note": "offline keyword matcher (key points / reference found in the answer), not an LLM"}
        endpoint = getattr(spec, "base_url", None) or getattr(spec, "name", None) or type(spec).__name__
        return {"kind": "model", "model": getattr(spec, "model", None) or self._model_name,
                "endpoint": redact_url(str(endpoint)), "prompt_hash": judges.PROMPT_HASH}

    def preflight(self, tasks: list[Task]) -> dict[str, Any]:
        """Before the first rollout: refuse the run when any task has no judge (ConfigError naming how
        many and how to set one), else return who judges, for run.json."""
        missing = [t.id for t in tasks if self.judge_spec(t) is None]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise ConfigError(f"no judge model is configured for {len(missing)} judge task(s) ({shown}); "
                              "nothing was run", hint=NO_JUDGE_HINT)
        seen: list[dict[str, Any]] = []
        for task in tasks:
            who = self.describe(task)
            if who not in seen:
                seen.append(who)
        return {"judge": seen[0] if len(seen) == 1 else seen}

    def _backend(self, task: Task) -> tuple[str, ModelBackend]:
        spec = self.judge_spec(task)
        if spec is None:
            raise InfraError("judge", f"judge task '{task.id}': no judge model is configured, so it cannot be "
                             "graded (the offline keyword matcher is used only when asked for)", hint=NO_JUDGE_HINT)
        if not isinstance(spec, str):
            return getattr(spec, "name", type(spec).__name__), spec
        spec = spec.strip()
        model = self._model_name_for(task)
        loop = asyncio.get_running_loop()
        cached = self._backends.get((spec, model))
        if cached is not None and cached[0] is loop:
            return redact_url(spec), cached[1]
        backend: ModelBackend
        if spec in KEYWORD_NAMES:
            backend = judges.KeywordJudge()
        else:
            from palaestra.models.factory import make_backend

            try:
                backend = make_backend(spec, model_name=model, timeout_s=self.timeout_s,
                                       api_key_env=self._api_key_env,
                                       max_concurrency=self.max_concurrency)
            except PalaestraError as exc:
                raise InfraError("judge", f"cannot build the judge model {redact_url(spec)!r}: {exc}",
                                 hint=NO_JUDGE_HINT) from exc
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
                   parse: Any) -> tuple[Any, str, str | None]:
        """One judgement: call the judge, parse its reply; retry failures and unreadable replies, then
        raise InfraError("judge"). Returns (parsed, reply text, the model name the judge reported)."""
        name, backend = self._backend(task)
        request = {"messages": messages, "temperature": 0.0, "max_tokens": 1024}
        last = ""
        for _ in range(self.retries + 1):
            try:
                async with self._semaphore():
                    response = await backend.chat(request, CallContext(task=task, extra={"judge": job}))
                text = str(response["choices"][0]["message"].get("content") or "")
                reported = response.get("model")
            except Exception as exc:  # unreachable, HTTP error, malformed body: retry, then fail(judge)
                last = f"call failed: {type(exc).__name__}: {exc}"
                continue
            parsed = parse(text)
            if parsed is not None:
                return parsed, text, str(reported) if reported else None
            last = f"unreadable reply: {text[:300]!r}"
        raise InfraError("judge", f"judge {name} failed {self.retries + 1} time(s) on task '{task.id}'; last: {last}",
                         hint=f"check that the judge is reachable and ends its reply as asked; {NO_JUDGE_HINT}")

    def _who(self, task: Task) -> dict[str, Any]:
        """``describe`` for verify: no judge at grading time is failed(judge), not a config crash."""
        try:
            return self.describe(task)
        except ConfigError as exc:
            raise InfraError("judge", f"{exc.message}, so it cannot be graded (the offline keyword matcher is "
                             "used only when asked for by name)", hint=exc.hint) from None

    async def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        self.check_task(state)
        meta = state.metadata
        who = self._who(state)
        answer = trajectory.final_text()
        mode = meta.get("mode", "absolute")
        if not answer.strip():  # nothing to grade: a rule decides, no judge is asked
            return Verdict(reward=0.0, passed=False, components={"judge_score": 0.0},
                           metadata={"mode": mode, "reason": "empty_answer",
                                     "judge": {"kind": "rule", "rule": "empty_answer"}})
        points = list(meta.get("key_points") or [])
        rubric = meta.get("rubric")
        question = _question(state)
        if mode == "absolute":
            messages = judges.absolute_messages(question, answer, reference=meta.get("reference_answer"),
                                                rubric=rubric, key_points=points)
            job = {"mode": "absolute", "answer": answer, "reference": meta.get("reference_answer"),
                   "key_points": points}
            score, reply, reported = await self._ask(state, messages, job, judges.parse_score)
            threshold = float(meta.get("pass_threshold", 0.7))
            return Verdict(reward=score, passed=score >= threshold, components={"judge_score": score},
                           metadata={"mode": mode, "judge_reply": reply[-2000:],
                                     "judge": _with_reported(who, reported)})
        baseline = str(meta["reference_answer"])
        orders = [(answer, baseline, {"A": "win", "B": "loss", "C": "tie"})]
        if meta.get("swap", True):
            orders.append((baseline, answer, {"A": "loss", "B": "win", "C": "tie"}))
        outcomes, replies = [], []
        for first, second, meaning in orders:
            messages = judges.pairwise_messages(question, first, second, rubric=rubric)
            job = {"mode": "pairwise", "answers": [first, second], "key_points": points}
            verdict, reply, reported = await self._ask(state, messages, job, judges.parse_verdict)
            outcomes.append(meaning[verdict])
            replies.append(reply[-1000:])
        consistent = len(set(outcomes)) == 1
        outcome = outcomes[0] if consistent else "tie"
        reward = OUTCOME_SCORE.get(outcome, float(meta.get("tie_score", 0.5)))
        return Verdict(reward=reward, passed=outcome == "win", components={"preference": reward,
                                                                          "consistent": float(consistent)},
                       metadata={"mode": mode, "outcome": outcome, "orders": outcomes, "judge_replies": replies,
                                 "judge": _with_reported(who, reported)})

    def grading_probes(self, task: Task, workdir: Path) -> list[GradingProbe]:
        """For ``env check``: the task with no judge named must be failed(judge), not graded by a
        fallback (skipped when a judge is configured for every task, e.g. by the environment variable)."""
        meta = {k: v for k, v in task.metadata.items() if k not in ("judge_model", "judge_model_name")}
        bare = task.model_copy(update={"id": f"{task.id}-no-judge", "metadata": meta})
        if self.judge_spec(bare) is not None:
            return []
        return [GradingProbe("no judge configured", bare, "judge")]

    def metrics(self, rollouts: list[Rollout]) -> dict[str, Any]:
        """How many verdicts each judge gave (``graded_by``), so a run graded by the keyword matcher —
        or by a mix of judges — says so in metrics.json."""
        counts: dict[str, int] = {}
        for r in rollouts:
            if r.verdict is None:
                continue
            label = judge_label(r.verdict.metadata.get("judge"))
            counts[label] = counts.get(label, 0) + 1
        if not counts:
            return {}
        out: dict[str, Any] = {"graded_by": dict(sorted(counts.items()))}
        keyword = sum(n for label, n in counts.items() if label.startswith("keyword"))
        if keyword:
            out["keyword_graded"] = keyword
            out["note"] = "verdicts graded by the offline keyword matcher are not LLM-judge grades"
        return out

    def reference(self, task: Task) -> Reference | None:
        """The answer a perfect model gives: ``metadata.oracle_answer``, else (absolute mode) the
        reference answer itself."""
        meta = task.metadata
        answer = meta.get("oracle_answer")
        if not answer and meta.get("mode", "absolute") == "absolute":
            answer = meta.get("reference_answer")
        return Reference(final_answer=str(answer)) if answer else None


def _with_reported(who: dict[str, Any], reported: str | None) -> dict[str, Any]:
    """The judge's description plus the model name its reply carried (what actually answered)."""
    if who.get("kind") == "model" and reported:
        return {**who, "model_reported": reported}
    return dict(who)


def judge_label(who: Any) -> str:
    """A short label for a verdict's ``metadata.judge``: ``keyword``, ``model:NAME@ENDPOINT``,
    ``rule:empty_answer``, or ``unrecorded`` for verdicts from before judges were recorded."""
    if not isinstance(who, dict):
        return "unrecorded"
    kind = str(who.get("kind") or "unrecorded")
    if kind == "keyword":
        return "keyword (offline matcher, not an LLM)"
    if kind == "rule":
        return f"rule:{who.get('rule')}"
    if kind == "model":
        model = who.get("model_reported") or who.get("model") or "default"
        return f"model:{model}@{who.get('endpoint')}"
    return kind
