"""The files ``palaestra env new`` writes, as ``string.Template`` texts (kept in Python, not as data
files, so they ship in every install). ``$name`` is the environment's name, ``$cls`` its class."""

from __future__ import annotations

ENV_PY = '''"""``$name``: a starter environment made by ``palaestra env new``. Replace the example with yours.

The example is a small key-value store. The task asks the model to store a value under a key and
then report it; ``verify`` checks both the store (what the model *did*) and the answer (what it *said*).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from palaestra import Environment, Reference, Task, ToolCall, ToolError, Trajectory, Verdict, tool


@dataclass
class State:
    """Per-session state: one fresh store for every rollout, built by ``seed`` from the task."""

    store: dict[str, str] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    answer: str = ""


class $cls(Environment):
    """Store values under keys, then report one: checks the tool effects and the final answer."""

    name = "$name"
    version = "0.1"
    domain = "example"
    mechanism = "stateful"
    system_prompt = "Use the tools to change the store, then reply with just the value you were asked for."

    def seed(self, task: Task) -> State:
        meta = task.metadata
        return State(store=dict(meta.get("initial", {})), expected=dict(meta["expected"]), answer=str(meta["answer"]))

    @tool
    def set_value(self, state: State, key: str, value: str) -> str:
        """Store a value under a key (overwrites).

        Args:
            key: the key, 1-40 characters.
            value: the value to store.
        """
        if not 0 < len(key) <= 40:
            raise ToolError(f"key {key!r} must have 1 to 40 characters", hint="use a shorter, non-empty key")
        state.store[key] = value
        return f"stored {key}"

    @tool
    def get_value(self, state: State, key: str) -> str:
        """Read the value stored under a key.

        Args:
            key: the key to read.
        """
        if key not in state.store:
            raise ToolError(f"no value under {key!r}", hint=f"known keys: {sorted(state.store)}")
        return state.store[key]

    def verify(self, state: State, trajectory: Trajectory) -> Verdict:
        stored = all(state.store.get(k) == v for k, v in state.expected.items())
        answered = trajectory.final_text().strip() == state.answer
        return Verdict(reward=0.5 * stored + 0.5 * answered, passed=stored and answered,
                       components={"stored": float(stored), "answered": float(answered)},
                       answer=trajectory.final_text().strip() or None)

    def reference(self, task: Task) -> Reference | None:
        ref = task.metadata.get("reference")
        if not ref:
            return None
        return Reference(tool_calls=[ToolCall(**c) for c in ref["tool_calls"]], final_answer=ref["final_answer"])
'''

EXAMPLES = [
    {"id": "$name-1", "input": "Store the value 'blue' under the key 'color', then tell me the color.",
     "metadata": {"expected": {"color": "blue"}, "answer": "blue",
                  "reference": {"tool_calls": [{"name": "set_value", "arguments": {"key": "color", "value": "blue"}}],
                                "final_answer": "blue"}}},
    {"id": "$name-2", "input": "The store holds a city. Change it to 'Lyon' and tell me the new city.",
     "metadata": {"initial": {"city": "Paris"}, "expected": {"city": "Lyon"}, "answer": "Lyon",
                  "reference": {"tool_calls": [{"name": "set_value", "arguments": {"key": "city", "value": "Lyon"}}],
                                "final_answer": "Lyon"}}},
    {"id": "$name-3", "input": "Copy the value under 'src' to the key 'dst', then tell me that value.",
     "metadata": {"initial": {"src": "42"}, "expected": {"src": "42", "dst": "42"}, "answer": "42",
                  "reference": {"tool_calls": [{"name": "get_value", "arguments": {"key": "src"}},
                                               {"name": "set_value", "arguments": {"key": "dst", "value": "42"}}],
                                "final_answer": "42"}}},
]

README = '''# $name

A starter environment made by `palaestra env new`. It measures whether a model can use stateful tools
and then report what it did: the example tasks ask it to store values under keys and name one.

## Tools

- `set_value(key, value)`: store a value (overwrites).
- `get_value(key)`: read a value; an unknown key is an error the model can read and recover from.

## Task fields (`data/examples.jsonl`)

| field | meaning |
|---|---|
| `id` | unique task id |
| `input` | the prompt shown to the model |
| `metadata.initial` | the store's content when the session starts (optional) |
| `metadata.expected` | key-value pairs the store must hold at the end |
| `metadata.answer` | the final answer expected |
| `metadata.reference` | the gold tool calls and final answer (used by the oracle and `env check`) |

`metadata` is verifier-only ground truth: the model never sees it.

## Reward

0.5 when the store holds every expected pair, plus 0.5 when the final answer equals `metadata.answer`;
passed when both hold.

## Check it

    palaestra env check ./$dir/env.py:$cls
    pytest $dir/tests
'''

TEST_PY = '''"""Conformance and behaviour of ``$name``: runs as generated, keep it passing as you change the env.

Plain (sync) tests that drive the event loop themselves, so they run under any pytest setup."""

from __future__ import annotations

import asyncio
from pathlib import Path

from palaestra.core.records import Task, Trajectory
from palaestra.envs.registry import load_env
from palaestra.rollout.conformance import check_env

HERE = Path(__file__).resolve().parents[1]
SPEC = f"{HERE / 'env.py'}:$cls"


def test_env_check_passes() -> None:
    report = asyncio.run(check_env(SPEC, "inprocess"))
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks >= 3


def test_wrong_answer_scores_half() -> None:
    env = load_env(SPEC)
    task = Task(id="t", input="x", metadata={"expected": {"k": "v"}, "answer": "v"})
    state = env.seed(task)
    asyncio.run(env.call_tool(state, "set_value", {"key": "k", "value": "v"}))
    verdict = env.verify(state, Trajectory(final_answer="w"))
    assert verdict.reward == 0.5 and not verdict.passed
'''

INIT_PY = '''"""``$name``: a Palaestra environment (made by ``palaestra env new``).

Load it by path: ``palaestra env check ./$dir/env.py:$cls``. Placed under ``palaestra/envs/``, declare it
for discovery here (and keep this file cheap: do not import env.py):

    ENVIRONMENTS = {"$name": "palaestra.envs.$pkg.env:$cls"}
"""
'''
