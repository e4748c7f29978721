"""What the judge is asked and how its reply is read, plus the offline keyword matcher.

A real judge is any model endpoint: it gets a rubric prompt and must end its reply with ``Score: N``
(absolute grading, 0-10) or one verdict ``[[A]]`` / ``[[B]]`` / ``[[C]]`` (pairwise; C is a tie).
The offline ``keyword`` matcher answers the same prompts in the same words, deterministically, by
checking which key points (or the reference answer) an answer contains. It is no LLM judge: it is
used only when asked for by name (``judge=keyword``), and every verdict it gives says so.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from typing import Any

from palaestra.models.base import CallContext

SCALE = 10

ABSOLUTE_SYSTEM = (
    "You are an impartial grader. Judge the candidate answer to the question against the rubric, the key "
    "points and the reference answer when they are given. Be strict about correctness and completeness; "
    "ignore style unless the rubric asks for it. Reply with a short justification, then a last line "
    f"'Score: N' where N is an integer from 0 (wrong or useless) to {SCALE} (fully correct and complete)."
)
PAIRWISE_SYSTEM = (
    "You compare two answers to the same question. Decide which one answers it better, following the rubric "
    "when one is given; the order in which the answers appear must not matter. Reply with a short "
    "justification, then end with exactly one verdict: [[A]] if answer A is better, [[B]] if answer B is "
    "better, [[C]] if they are equally good."
)


def _section(title: str, body: str | None) -> str:
    return f"## {title}\n{body.strip()}\n\n" if body and body.strip() else ""


def _points(key_points: list[Any]) -> str:
    return "\n".join(f"- {p if isinstance(p, str) else ' / '.join(map(str, p))}" for p in key_points)


ABSOLUTE_TAIL = "Grade the candidate answer. End with 'Score: N'."
PAIRWISE_TAIL = "Which answer is better? End with [[A]], [[B]] or [[C]]."
# Which prompts graded a verdict: recorded with every verdict and in run.json, so two runs graded
# with different prompts are never compared unawares.
PROMPT_HASH = hashlib.sha256("\0".join((ABSOLUTE_SYSTEM, PAIRWISE_SYSTEM, ABSOLUTE_TAIL, PAIRWISE_TAIL))
                             .encode()).hexdigest()[:12]


def absolute_messages(question: str, answer: str, *, reference: str | None, rubric: str | None,
                      key_points: list[Any]) -> list[dict[str, str]]:
    user = (_section("Question", question) + _section("Reference answer", reference) + _section("Rubric", rubric)
            + _section("Key points the answer should contain", _points(key_points))
            + _section("Candidate answer", answer) + ABSOLUTE_TAIL)
    return [{"role": "system", "content": ABSOLUTE_SYSTEM}, {"role": "user", "content": user}]


def pairwise_messages(question: str, first: str, second: str, *, rubric: str | None) -> list[dict[str, str]]:
    user = (_section("Question", question) + _section("Rubric", rubric) + _section("Answer A", first)
            + _section("Answer B", second) + PAIRWISE_TAIL)
    return [{"role": "system", "content": PAIRWISE_SYSTEM}, {"role": "user", "content": user}]


_SCORE = re.compile(r"score\s*(?:is)?\s*[:=]?\s*\**\s*(\d+(?:\.\d+)?)\s*\**\s*(?:/\s*(\d+))?", re.IGNORECASE)
_BRACKET_SCORE = re.compile(r"\[\[\s*(\d+(?:\.\d+)?)\s*\]\]")
_VERDICT = re.compile(r"\[\[\s*([ABC])\s*\]\]")


def parse_score(text: str) -> float | None:
    """The last ``Score: N`` (or ``N/10``, or ``[[N]]``) as a fraction of the scale; None if absent or
    out of range."""
    found = [(m.start(), m.group(1), m.group(2)) for m in _SCORE.finditer(text)]
    found += [(m.start(), m.group(1), None) for m in _BRACKET_SCORE.finditer(text)]
    if not found:
        return None
    _, value, denominator = max(found)
    scale = float(denominator) if denominator else float(SCALE)
    score = float(value)
    if scale <= 0 or not 0 <= score <= scale:
        return None
    return score / scale


def parse_verdict(text: str) -> str | None:
    """The last ``[[A]]``, ``[[B]]`` or ``[[C]]`` in the reply."""
    found = _VERDICT.findall(text)
    return found[-1] if found else None


def normalize(text: str) -> str:
    """Casefolded words without accents or punctuation, so "Paris." matches "paris"."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    return " ".join(re.sub(r"[^\w]+", " ", text).split())


def _contains(answer: str, needle: str) -> bool:
    a, n = f" {normalize(answer)} ", f" {normalize(needle)} "
    return n.strip() != "" and n in a


def coverage(answer: str, *, key_points: list[Any], reference: str | None) -> float:
    """Fraction of key points present (a point may list alternatives); without key points, 1.0 when
    the reference answer appears in the answer."""
    if key_points:
        hits = sum(1 for p in key_points if any(_contains(answer, alt) for alt in ([p] if isinstance(p, str) else p)))
        return hits / len(key_points)
    return 1.0 if reference and _contains(answer, reference) else 0.0


class KeywordJudge:
    """The offline keyword matcher, used only when asked for by name. It reads the grading job from
    ``ctx.extra["judge"]`` (set by the environment next to the prompt) and answers like an LLM judge
    would, so the same parsing runs."""

    name = "keyword"

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        job = (ctx.extra if ctx is not None else {}).get("judge")
        if not isinstance(job, dict):
            text = "I have no grading inputs for this request."
        elif job.get("mode") == "pairwise":
            a, b = (coverage(x, key_points=job.get("key_points") or [], reference=None) for x in job["answers"])
            verdict = "A" if a > b else "B" if b > a else "C"
            text = f"Answer A covers {a:.0%} and answer B covers {b:.0%} of the key points.\n[[{verdict}]]"
        else:
            frac = coverage(job["answer"], key_points=job.get("key_points") or [], reference=job.get("reference"))
            text = f"The answer covers {frac:.0%} of what the reference requires.\nScore: {round(frac * SCALE)}"
        return {
            "id": "judge-keyword", "object": "chat.completion", "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }

    async def aclose(self) -> None:
        return None


ReferenceMatchJudge = KeywordJudge  # the name it had before it had to be asked for
