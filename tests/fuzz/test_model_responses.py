"""Hostile model responses: the tool agent and the rollout runner driven by a model that answers
arbitrary chat-completion bodies (missing choices, wrong types, junk tool calls, huge content).

Promise under test: ``run_rollout`` always returns a Rollout that is ``scored`` or ``failed`` with a
message; since the environment here is healthy, every failure is the model's (``failed(model)``); the
record can be journaled (``encode_record``) and no session is left open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from fuzz_strategies import INTEGERS, JSON, STRINGS, chat_completions, ci, long, run, with_loop
from hypothesis import given, settings
from hypothesis import strategies as st

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.records import Rollout, Task
from palaestra.models.base import CallContext
from palaestra.placement import MountedEnv, mount_env
from palaestra.rollout.journal import encode_record
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

COUNTER = f"{Path(__file__).parents[1] / 'fixtures' / 'counter_env.py'}:CounterEnv"
TASK = Task(id="t", env="counter", input="Bring the counter to 3.", metadata={"start": 0, "target": 3})
FINAL = {"choices": [{"message": {"role": "assistant", "content": "3"}}]}
HUGE = "x" * 300_000


class JunkModel:
    """A backend that answers the given bodies in order, then a plain final answer."""

    name = "junk"

    def __init__(self, bodies: Iterable[Any]) -> None:
        self._bodies = list(bodies)

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> Any:
        return self._bodies.pop(0) if self._bodies else FINAL

    async def aclose(self) -> None:
        return None


# ---- strategies -----------------------------------------------------------------------------------
TOOL_NAMES = st.sampled_from(["add", "read", "explode", "nope", "final_answer"]) | STRINGS
ARGUMENTS = st.one_of(
    st.builds(lambda n: f'{{"amount": {n}}}', INTEGERS | st.sampled_from([1, -1, 100, 101])),
    st.sampled_from(['{"amount": "1"}', '{"amount": 1, "x": 2}', "{amount: 1}", '{"amount": 1', "[1]", "null",
                     "", "  ", '{"why": "' + "w" * 5000 + '"}', '"\\u0000"']),
    STRINGS, JSON,
)
BODY = chat_completions(TOOL_NAMES, ARGUMENTS, st.just(HUGE) | st.just([{"type": "text", "text": "3"}]))
BODIES = st.lists(BODY, min_size=1, max_size=4)


# ---- the property ---------------------------------------------------------------------------------
async def _rollout(env: MountedEnv, bodies: list[Any]) -> Rollout:
    return await run_rollout(TASK, env=env.client, agent=ToolAgent(max_steps=6), proxy=ModelProxy(JunkModel(bodies)),
                             model_name="junk", deadline_s=60.0)


def _check(rollout: Rollout) -> None:
    assert isinstance(rollout, Rollout)
    status, kind, message = rollout.outcome.status, rollout.outcome.kind, rollout.outcome.message
    assert status in ("scored", "failed"), rollout.outcome
    if status == "failed":
        assert kind == "model", f"a junk model response must fail as model, got {kind}: {message}"
        assert message and message.strip() and rollout.verdict is None
    else:
        assert rollout.verdict is not None and 0.0 <= rollout.verdict.reward <= 1.0
        assert isinstance(rollout.trajectory.final_answer, str)
    line = encode_record(rollout)  # the collector journals every rollout it gets
    assert line.endswith(b"\n") and b"\n" not in line[:-1]


def _property(cfg: settings, placement: str) -> None:
    def body(loop: asyncio.AbstractEventLoop) -> None:
        env = run(loop, mount_env(COUNTER, placement))

        @cfg
        @given(BODIES)
        def prop(bodies: list[Any]) -> None:
            from hypothesis import event

            rollout = run(loop, _rollout(env, bodies))
            event(f"{rollout.outcome.status} {rollout.outcome.kind} calls={len(rollout.trajectory.tool_calls)}")
            _check(rollout)

        try:
            prop()
            host = getattr(env.client, "host", None)
            client: Any = env.client
            sessions = len(host.sessions) if host is not None else run(loop, client.health())["sessions"]
            assert sessions == 0, "every rollout must close its session"
        finally:
            run(loop, env.stop())

    with_loop(body)


@pytest.mark.parametrize("placement", ["inprocess", "direct"])
def test_junk_model_responses_end_as_scored_or_failed_model(placement: str) -> None:
    _property(ci(80), placement)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("placement", ["inprocess", "direct"])
def test_junk_model_responses_long(placement: str) -> None:
    _property(long(4000), placement)


# ---- bugs this suite found, kept as regression tests ---------------------------------------------------
def _msg(message: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"choices": [{"message": message}], **top}


def _call(name: Any, arguments: Any = "{}") -> dict[str, Any]:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}


BUGS = {
    "tool_calls_not_a_list": (
        [_msg({"content": None, "tool_calls": 5})],
        "agents/tool_agent.py ToolAgent.run iterates message.tool_calls without checking it is a list: "
        "tool_calls=5 raises TypeError ('int' object is not iterable) -> failed(agent); expected failed(model) "
        "(ModelError naming the field) or a bad_call tool message"),
    "name_not_a_string": (
        [_msg({"tool_calls": [_call(5)]})],
        "agents/tool_agent.py _unpack_call passes a non-string function.name on: ToolCallRecord(name=5) raises "
        "pydantic ValidationError -> failed(agent); expected a bad_call tool message (as for a missing name)"),
    "content_parts": (
        [_msg({"content": [{"type": "text", "text": "3"}]})],
        "agents/tool_agent.py sets Trajectory.final_answer to message.content as it is: OpenAI content parts "
        "[{type: text, text: '3'}] make final_answer a list -> the env server rejects the trajectory (422 "
        "final_answer: Input should be a valid string) -> failed(environment); direct placement: "
        "failed(verifier) AttributeError. Expected final_answer '3' (the parts' text, like Trajectory.final_text)"),
    "content_not_a_string": (
        [_msg({"content": 7})],
        "agents/tool_agent.py: message.content=7 becomes final_answer=7 -> failed(environment) (inprocess, 422 "
        "from /verify) or failed(verifier) (direct); expected failed(model) or a string final answer"),
    "routed_to_not_a_string": (
        [_msg({"content": "3"}, palaestra_routed_to=3)],
        "server/model_proxy.py ModelProxy.complete builds ModelCallRecord(routed_to=response.get("
        "'palaestra_routed_to')) unchecked: a non-string raises pydantic ValidationError inside the agent -> "
        "failed(agent); expected the field ignored (or failed(model))"),
    "route_breaking_name": (
        [_msg({"tool_calls": [_call("a/b")]})],
        "client/env_client.py HttpTransport.request: a tool name with '/' (or '', '.', '..', '%2F') changes "
        "the URL, the env server answers a plain-text 404/405 -> EnvironmentFailure -> failed(environment) "
        "(and the collector retries it); expected an unknown_tool tool message the model can read"),
    "usage_overflow": (
        [_msg({"tool_calls": [_call("read")]}, usage={"prompt_tokens": 2**64 - 1}),
         _msg({"content": "3"}, usage={"prompt_tokens": 2**64 - 1})],
        "core/records.py Usage.add / rollout/runner.py sum usage.prompt_tokens over model calls unchecked: two "
        "responses reporting 18446744073709551615 tokens (a valid 64-bit JSON number) give Rollout.usage."
        "prompt_tokens = 2**65 - 2, which encode_record cannot write (orjson: 'Integer exceeds 64-bit range'), "
        "so Collector._one's journal.append raises TypeError and the whole run stops; negative counts are "
        "kept too. Expected: token counts validated/clamped (0 <= n < 2**63) where the proxy records usage"),
    "control_char_name": (
        [_msg({"tool_calls": [_call("add\n")]})],
        "client/env_client.py HttpTransport.request: a tool name with a control character makes httpx raise "
        "InvalidURL -> failed(agent); expected an unknown_tool tool message"),
}


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("placement", ["inprocess", "direct"])
@pytest.mark.parametrize("bug", list(BUGS))
def test_known_bug(bug: str, placement: str, request: pytest.FixtureRequest) -> None:
    bodies, reason = BUGS[bug]
    del reason, request  # fixed: each former bug is now a regression test in both placements

    def body(loop: asyncio.AbstractEventLoop) -> None:
        env = run(loop, mount_env(COUNTER, placement))
        try:
            rollout = run(loop, _rollout(env, bodies))
        finally:
            run(loop, env.stop())
        _check(rollout)
        if bug == "content_parts":
            assert rollout.trajectory.final_answer == "3"

    with_loop(body)


def test_rollout_with_lone_surrogate_can_be_journaled() -> None:
    def body(loop: asyncio.AbstractEventLoop) -> None:
        env = run(loop, mount_env(COUNTER, "direct"))
        try:
            rollout = run(loop, _rollout(env, [_msg({"tool_calls": [_call("read", '{"x": "\ud800"}')]})]))
        finally:
            run(loop, env.stop())
        encode_record(rollout)

    with_loop(body)


@pytest.mark.parametrize("name", ["\n0", "ad\nd", "add\n", "add\r\n", "add\x00", "\tadd"],
                         ids=["leading", "inside", "trailing", "crlf", "nul", "tab"])
def test_tool_name_with_newline_is_an_unknown_tool(name: str) -> None:
    """Found by this suite: Starlette's ``path`` convertor (``.*``, no DOTALL, before ``$``) made a name with a
    newline miss the tool route (a bare 404 -> failed(agent)) or match a shorter name ('add\\n' ran 'add').
    The route now takes any name, and the host answers an unknown one with unknown_tool."""

    def body(loop: asyncio.AbstractEventLoop) -> None:
        env = run(loop, mount_env(COUNTER, "inprocess"))
        try:
            rollout = run(loop, _rollout(env, [_msg({"tool_calls": [_call(name, '{"amount": 1}')]})]))
        finally:
            run(loop, env.stop())
        _check(rollout)
        assert rollout.trajectory.tool_calls[0].error is not None, rollout.trajectory.tool_calls[0]
        assert rollout.trajectory.tool_calls[0].error["kind"] == "unknown_tool"

    with_loop(body)
