"""NeMo Gym compatibility for tool_call: grade a reply the way NeMo Gym 0.7's tool-call servers do.

Used only under ``nemo_compat``. NeMo Gym has three tool-call servers, and each grades differently from
Palaestra's own comparison (``match.py``) and from the others:

- ``xlam_fc``: only the expected call's keys are checked (an extra argument is free), values compare
  with Python ``==`` (``1 == 1.0 == True``), calls pair greedily in order, and the reply must make
  exactly as many calls as expected. Arguments that are no JSON object count as ``{}``.
- ``single_step_tool_use_with_argument_comparison``: calls take precedence over text; a reply of text
  answers a row that expects a message. Values must have the expected JSON type (an int is no float),
  floats match within 1e-6, and a string of two words or more matches by word-count similarity
  (shared words over all words, case-blind) at or above its config's threshold. With
  ``parallel_tool_call_rewarding`` off (its default), surplus calls are free.
- ``example_tool_call_multireward``: three 0/1 components summed: ``correctness`` (some call has the
  expected name and every expected argument), ``schema_valid`` (the first call's arguments are an object
  holding the tool's required parameters) and ``format`` (exactly one call, no text).

This module restates those rules from NeMo Gym's documented and measured behaviour (its code is never
copied or imported); tests/parity/test_nemo_parity_families.py checks it verdict for verdict against the
installed wheel. Which server a row was written for comes from the row (``server_of``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from palaestra.envs.tool_call.match import max_matching

XLAM = "xlam_fc"
SINGLE_STEP = "single_step_tool_use_with_argument_comparison"
MULTIREWARD = "example_tool_call_multireward"
SERVERS = (XLAM, SINGLE_STEP, MULTIREWARD)
# The verifier field each server's rows carry: how a row without an agent_ref tells its server.
_BY_FIELD = (("expected_action", SINGLE_STEP), ("expected_answers", XLAM), ("expected_call", MULTIREWARD))


class Unparsed:
    """Arguments that were text but no JSON (NeMo Gym's single-step server: a decode error)."""


UNPARSED = Unparsed()


@dataclass(frozen=True)
class Reply:
    """What NeMo Gym's servers read of a reply: its calls, (name, arguments as parsed JSON or
    ``UNPARSED``), and whether it holds assistant text (a message item, even an empty one)."""

    calls: list[tuple[str, Any]]
    has_text: bool


@dataclass(frozen=True)
class Comparator:
    """The single-step server's ``tool_call_comparator_config``."""

    word_threshold: float = 0.1
    float_tolerance: float = 1e-6
    count_calls: bool = False  # parallel_tool_call_rewarding
    allow_subset: bool = False
    allow_superset: bool = False
    mode: str = "binary_strict"  # or fractional, f1


# The configs NeMo Gym 0.7 ships for the single-step server, by the prefix of their agents' names; any
# other agent (and a row without one) gets its default config's (threshold 0.1, surplus calls free).
SINGLE_STEP_CONFIGS: dict[str, Comparator] = {
    "droid_pivot_": Comparator(word_threshold=0.0),
    "swe_pivot_": Comparator(word_threshold=0.0),
    "search_pivot_": Comparator(word_threshold=0.3),
    "parallel_tool_calls_": Comparator(count_calls=True, allow_subset=True, allow_superset=True, mode="f1"),
}


def _field(meta: Mapping[str, Any], key: str) -> Any:
    if key in meta:
        return meta[key]
    nested = meta.get("verifier_metadata")
    return nested.get(key) if isinstance(nested, dict) else None


def agent_name(meta: Mapping[str, Any]) -> str:
    ref = meta.get("nemo_gym_agent_ref") or meta.get("agent_ref")
    name = ref.get("name") if isinstance(ref, dict) else ref
    return name if isinstance(name, str) else ""


def server_of(meta: Mapping[str, Any]) -> str | None:
    """The NeMo Gym tool-call server a row was written for: ``metadata.nemo_gym_resources_server``, else
    the one its ``agent_ref`` names (as whole words: ``search_pivot_single_step_..._agent``), else the
    one whose verifier field the row carries; None for a row of none of them (Palaestra's reading)."""
    named = meta.get("nemo_gym_resources_server")
    if isinstance(named, str) and named:
        return named if named in SERVERS else None
    words = "_" + agent_name(meta) + "_"
    for server in SERVERS:
        if f"_{server}_" in words:
            return server
    for key, server in _BY_FIELD:
        if _field(meta, key) is not None:
            return server
    return None


def expects_message(meta: Mapping[str, Any], n_expected: int) -> bool:
    """Whether a single-step row expects a message rather than calls (its ``expected_action`` type; a row
    without one: when it expects no call)."""
    action = _field(meta, "expected_action")
    return action.get("type") == "message" if isinstance(action, dict) else n_expected == 0


def comparator(meta: Mapping[str, Any]) -> Comparator:
    name = agent_name(meta)
    return next((c for prefix, c in SINGLE_STEP_CONFIGS.items() if name.startswith(prefix)), Comparator())


def _object(arguments: Any) -> dict[str, Any]:
    """Arguments as xlam_fc and multireward read them: a JSON object, anything else ``{}``."""
    return arguments if isinstance(arguments, dict) else {}


# ---- xlam_fc ------------------------------------------------------------------------------------------


def xlam(expected: Sequence[tuple[str, dict[str, Any]]], reply: Reply) -> tuple[float, int]:
    """(reward, calls matched): each expected call takes the first unused call with its name and every
    expected key equal; reward 1 only when all match and no call is left over."""
    if not expected:
        return (0.0 if reply.calls else 1.0), 0
    used: set[int] = set()
    for name, args in expected:
        for i, (got_name, got_args) in enumerate(reply.calls):
            got = _object(got_args)
            if i not in used and got_name == name and all(k in got and got[k] == v for k, v in args.items()):
                used.add(i)
                break
    return (1.0 if len(used) == len(expected) == len(reply.calls) else 0.0), len(used)


# ---- single_step_tool_use_with_argument_comparison ----------------------------------------------------


def _same(expected: Any, got: Any, cfg: Comparator) -> bool:
    """The single-step server's value comparison (see the module docstring)."""
    if not isinstance(got, type(expected)):
        return False
    if isinstance(expected, dict):
        return set(expected) == set(got) and all(_same(v, got[k], cfg) for k, v in expected.items())
    if isinstance(expected, list):
        return len(expected) == len(got) and all(_same(e, g, cfg) for e, g in zip(expected, got, strict=True))
    if isinstance(expected, float):
        return bool(abs(got - expected) < cfg.float_tolerance)
    if isinstance(expected, str):
        want, have = Counter(expected.strip().lower().split()), Counter(got.strip().lower().split())
        if want.total() < 2 or have.total() < 2:
            return expected == got
        return (want & have).total() / (want.total() + have.total()) >= cfg.word_threshold
    return bool(expected == got)


def single_step(expected: Sequence[tuple[str, Any]] | None, reply: Reply, cfg: Comparator) -> tuple[float, str]:
    """(reward, why). ``expected`` None: the row expects a message (any text, and no call, scores 1)."""
    if not reply.calls and not reply.has_text:
        return 0.0, "no_action"
    if expected is None:
        return (0.0, "call_instead_of_message") if reply.calls else (1.0, "message")
    if not reply.calls:
        return 0.0, "message_instead_of_call"
    n_exp, n_got = len(expected), len(reply.calls)
    if n_exp != n_got and cfg.count_calls and not (cfg.allow_subset if n_got < n_exp else cfg.allow_superset):
        return 0.0, "call_count"
    grid = [
        [
            name == got_name and not isinstance(got_args, Unparsed) and _same(args, got_args, cfg)
            for got_name, got_args in reply.calls
        ]
        for name, args in expected
    ]
    matched = sum(1 for owner in max_matching(grid) if owner >= 0)
    if not cfg.count_calls:
        reward = 1.0 if matched == n_exp else 0.0
    elif cfg.mode == "f1":
        reward = 2 * matched / (n_exp + n_got)
    else:
        required = min(n_exp, n_got) if cfg.allow_subset else n_exp
        reward = (matched / required if required else 0.0) if cfg.mode == "fractional" else float(matched == required)
    return reward, "matched" if reward == 1.0 else "calls_differ"


# ---- example_tool_call_multireward --------------------------------------------------------------------


def multireward(
    expected: tuple[str, dict[str, Any]] | None, reply: Reply, required: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """The three components; ``required`` holds each tool's required parameters by name."""
    fmt = float(len(reply.calls) == 1 and not reply.has_text)
    schema = 0.0
    if reply.calls:
        name, args = reply.calls[0]
        schema = float(isinstance(args, dict) and all(k in args for k in required.get(name, ())))
    correct = 0.0
    if expected is not None:
        want_name, want_args = expected
        correct = float(
            any(
                name == want_name and all(_object(args).get(k) == v for k, v in want_args.items())
                for name, args in reply.calls
            )
        )
    return {"correctness": correct, "schema_valid": schema, "format": fmt}
