"""Shared pieces of the fuzz suite: hypothesis settings for the short CI run and the long ``fuzz`` run,
JSON strategies shaped like what arrives over the wire, and a helper to drive async code from a
property (hypothesis properties are synchronous)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

T = TypeVar("T")

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.large_base_example]


def ci(max_examples: int, *, shrink: bool = False) -> settings:
    """The default CI run: a fixed budget, derandomized (the same examples every run of the same test
    selection), no example database (nothing written to the working tree), no per-example deadline (slow
    runners), and no shrinking: shrinking a failing rollout can outlast the per-test timeout, so CI reports
    the raw failing example with a ``@reproduce_failure`` blob; the ``fuzz`` variants shrink."""
    phases = list(Phase) if shrink else [Phase.explicit, Phase.reuse, Phase.generate]
    return settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
                    suppress_health_check=_HEALTH, print_blob=True, phases=phases)


def long(max_examples: int) -> settings:
    """The ``fuzz`` variant run by the bench script: random seeds, many more examples.
    ``PALAESTRA_FUZZ_EXAMPLES`` caps the count (``bench/fuzz_long.py --tiny``: a smoke run of the plumbing)."""
    cap = os.environ.get("PALAESTRA_FUZZ_EXAMPLES")
    if cap:
        max_examples = max(1, min(max_examples, int(cap)))
    return settings(max_examples=max_examples, deadline=None, database=None, suppress_health_check=_HEALTH,
                    print_blob=True)


def run(loop: asyncio.AbstractEventLoop, coro: Awaitable[T]) -> T:
    return loop.run_until_complete(coro)


def with_loop(fn: Callable[[asyncio.AbstractEventLoop], T]) -> T:
    """Run ``fn(loop)`` with a private event loop, closed afterwards (works on Python 3.10)."""
    loop = asyncio.new_event_loop()
    try:
        return fn(loop)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


# ---- JSON values ----------------------------------------------------------------------------------
# What a JSON parser on the wire (orjson) can hand us: 64-bit integers, finite floats, text without lone
# surrogates. Python-only values (big ints, NaN, surrogates) cannot arrive over HTTP.
INTEGERS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text(max_size=24)
SPECIAL_TEXT = st.sampled_from(["", " ", "\n", "\x00", "é", "𝔘", "\u202e", "null", "{}", "[]", "{", "\"", "\\",
                                "../..", "%2F", "a/b", "?x", "#", "' OR 1=1 --", "<script>", "NaN", "1e400"])
STRINGS = TEXT | SPECIAL_TEXT
SCALARS = st.none() | st.booleans() | INTEGERS | FLOATS | STRINGS


def json_values(keys: st.SearchStrategy[str] = STRINGS, leaves: st.SearchStrategy[Any] = SCALARS,
                max_leaves: int = 25) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=6),
                        max_leaves=max_leaves)


JSON = json_values()
JSON_OBJECTS = st.dictionaries(STRINGS, JSON, max_size=6)


def nested(depth: int, leaf: Any = 0) -> Any:
    """``depth`` nested lists around ``leaf``: built iteratively (no recursion limit on our side)."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick a strategy with the given weights (``st.one_of`` would merge repeated strategies into one)."""
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


def maybe(strategy: st.SearchStrategy[Any], junk: st.SearchStrategy[Any] = JSON) -> st.SearchStrategy[Any]:
    """Mostly the well-formed value, sometimes anything at all: wrong types where a field is expected."""
    return weighted((4, strategy), (1, junk))


def shaped_dict(fields: dict[str, st.SearchStrategy[Any]], extra: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with any subset of ``fields`` (each possibly junk) plus, optionally, unknown keys."""
    optional = st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in fields.items()})
    if not extra:
        return optional
    return st.builds(lambda a, b: {**b, **a}, optional, st.dictionaries(TEXT, JSON, max_size=2))


def chat_completions(names: st.SearchStrategy[Any], arguments: st.SearchStrategy[Any],
                     content: st.SearchStrategy[Any] = st.nothing()) -> st.SearchStrategy[Any]:
    """Chat-completion response bodies: mostly well shaped (tool calls with the given names and
    arguments), sometimes with junk in any field, sometimes not a completion at all."""
    valid_call = st.fixed_dictionaries({"id": STRINGS, "type": st.just("function"),
                                        "function": st.fixed_dictionaries({"name": names, "arguments": arguments})})
    call = weighted((6, valid_call), (1, shaped_dict({"id": STRINGS, "type": st.just("function"), "function":
                                                     shaped_dict({"name": names, "arguments": arguments})})),
                    (1, JSON))
    text = st.none() | STRINGS | content
    message = weighted(
        (2, st.fixed_dictionaries({"role": st.just("assistant"), "content": text},
                                  optional={"tool_calls": st.lists(call, min_size=1, max_size=3)})),
        (3, st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none(),
                                   "tool_calls": st.lists(call, min_size=1, max_size=3)})),
        (1, shaped_dict({"role": st.just("assistant"), "content": text, "tool_calls": st.lists(call, max_size=3),
                         "reasoning_content": STRINGS})),
    )
    choice = st.fixed_dictionaries({"index": st.just(0), "message": message},
                                   optional={"finish_reason": st.sampled_from(["stop", "length", "tool_calls"]) | JSON,
                                             "stop_reason": STRINGS})
    top = shaped_dict({"id": STRINGS, "model": STRINGS, "created": INTEGERS,
                       "usage": shaped_dict({"prompt_tokens": INTEGERS, "completion_tokens": INTEGERS}),
                       "palaestra_routed_to": STRINGS, "prompt_token_ids": st.lists(INTEGERS, max_size=3)}, extra=False)
    well_shaped = st.builds(lambda c, extra: {**extra, "choices": [c]}, choice, top)
    return weighted((8, well_shaped), (1, shaped_dict({"choices": st.lists(maybe(shaped_dict({"message": message})),
                                                                          max_size=2)})), (1, JSON))
