from __future__ import annotations

import pytest

from palaestra.core.errors import InvalidTask, ToolError
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.envs.sokoban.env import Sokoban
from palaestra.envs.sokoban.game import Board, play, solve
from palaestra.envs.sokoban.generate import generate
from palaestra.server.sessions import EnvironmentHost

TWO_BOXES = [
    "#######",
    "#.$ $.#",
    "#  @  #",
    "#######",
]


def _task(level: list[str], **meta: object) -> Task:
    return Task(id="t", env="sokoban", input="Solve it.", metadata={"level": level, **meta})


def test_every_bundled_solution_solves_its_level_and_is_shortest() -> None:
    tasks = Sokoban().examples()
    assert len(tasks) >= 20
    for task in tasks:
        level, solution = task.metadata["level"], task.metadata["solution"]
        assert not Board.parse(level).solved()
        assert play(level, solution).solved(), task.id
        assert len(solve(level) or "") == len(solution), task.id


async def test_reference_solves_through_the_tool_and_null_scores_zero() -> None:
    env = Sokoban()
    for task in env.examples():
        state = env.seed(task)
        ref = env.reference(task)
        assert ref is not None and len(ref.tool_calls) <= 14
        for call in ref.tool_calls:
            await env.call_tool(state, call.name, call.arguments)
        verdict = env.verify(state, Trajectory())
        assert verdict.reward == 1.0 and verdict.passed and verdict.components["efficiency"] == 1.0
        assert verdict.metadata["return"] == pytest.approx(
            -0.1 * len(task.metadata["solution"]) + len(state.board.boxes) + 10)
        assert env.verify(env.seed(task), Trajectory()).reward == 0.0


async def test_moves_push_boxes_and_partial_progress_earns_half_credit() -> None:
    env = Sokoban()
    state = env.seed(_task(TWO_BOXES, solution="ULRR"))
    out = await env.call_tool(state, "move", {"direction": "up"})
    assert "up: moved" in out and "Boxes on goals: 0/2" in out
    out = await env.call_tool(state, "move", {"direction": "left"})
    assert "pushed a box" in out and "Boxes on goals: 1/2" in out and "#*@ $.#" in out
    verdict = env.verify(state, Trajectory())
    assert verdict.reward == 0.25 and not verdict.passed
    assert verdict.components["progress"] == 0.5 and verdict.metadata["step_rewards"] == [-0.1, 0.9]
    out = await env.call_tool(state, "move", {"direction": "R R R"})
    assert "SOLVED" in out and "1 remaining move(s) ignored: the level is solved" in out
    solved = env.verify(state, Trajectory())
    assert solved.reward == 1.0 and solved.metadata["moves"] == "ULRR"
    assert solve(TWO_BOXES) == "ULRR" and solved.components["efficiency"] == 1.0
    assert "efficiency" not in env.verify(env.seed(_task(TWO_BOXES)), Trajectory()).components
    with pytest.raises(ToolError, match="already solved"):
        await env.call_tool(state, "move", {"direction": "left"})


async def test_blocked_moves_change_nothing() -> None:
    env = Sokoban()
    state = env.seed(_task(TWO_BOXES))
    out = await env.call_tool(state, "move", {"direction": "down"})
    assert "down: blocked" in out and state.board.player == (2, 3) and state.board.moves == []
    assert env.verify(state, Trajectory()).metadata["blocked_moves"] == 1


@pytest.mark.parametrize("direction", ["diagonal", "", "up, sideways", "jump"])
async def test_unparseable_moves_are_errors_the_model_reads(direction: str) -> None:
    env = Sokoban()
    state = env.seed(_task(TWO_BOXES))
    with pytest.raises(ToolError, match="cannot read the move"):
        await env.call_tool(state, "move", {"direction": direction})
    host = EnvironmentHost(env)
    opened = await host.open(_task(TWO_BOXES))
    result = await host.call_tool(opened["session_id"], "move", {"direction": direction})
    assert result.error is not None and result.error["kind"] == "tool_error"
    await host.close_all()


async def test_move_limit_and_aliases() -> None:
    env = Sokoban()
    state = env.seed(_task(TWO_BOXES, max_moves=2))
    out = await env.call_tool(state, "move", {"direction": "ULR"})
    assert state.board.moves == ["U", "L"] and "1 remaining move(s) ignored: the move limit of 2" in out
    with pytest.raises(ToolError, match="move limit of 2"):
        await env.call_tool(state, "move", {"direction": "east"})


async def test_replaying_the_tool_calls_reproduces_the_verdict() -> None:
    env = Sokoban()
    host = EnvironmentHost(env)
    task = _task(TWO_BOXES)
    calls = [{"direction": d} for d in ("up", "left", "nonsense", "right")]
    opened = await host.open(task)
    records = []
    for args in calls:
        result = await host.call_tool(opened["session_id"], "move", args)
        records.append(ToolCallRecord(name="move", arguments=args, output=result.output, error=result.error,
                                      status="error" if result.error else "ok"))
    live = await host.verify(opened["session_id"], Trajectory(tool_calls=records))
    replayed = await host.verify_stateless(task, Trajectory(tool_calls=records))
    assert live.model_dump() == replayed.model_dump() and live.metadata["moves"] == "ULR"
    await host.close_all()


def test_bad_levels_are_rejected() -> None:
    env = Sokoban()
    with pytest.raises(InvalidTask, match="exactly one player"):
        env.check_task(_task(["#####", "#$. #", "#####"]))
    with pytest.raises(InvalidTask, match="as many boxes as goals"):
        env.check_task(_task(["#####", "#@$$.#", "#####"]))
    with pytest.raises(InvalidTask, match="already solved"):
        env.check_task(_task(["#####", "#@* #", "#####"]))
    with pytest.raises(InvalidTask, match="U/D/L/R"):
        env.check_task(_task(TWO_BOXES, solution="up"))


def test_prompt_shows_the_board_and_the_generator_is_deterministic() -> None:
    env = Sokoban()
    messages = env.prompt(_task(TWO_BOXES))
    assert messages[0]["role"] == "system" and "\n".join(TWO_BOXES) in messages[-1]["content"]
    first, second = generate(3, seed=11), generate(3, seed=11)
    assert first == second
    for row in first:
        assert play(row["metadata"]["level"], row["metadata"]["solution"]).solved()
