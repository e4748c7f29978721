"""``sokoban``: a multi-turn puzzle played through a ``move`` tool. It measures planning over many
steps with feedback: every move answers with the new board, a per-step reward is kept, and the
verdict rewards solving the level (with partial credit for boxes brought onto goals).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask, ToolError
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.core.tools import tool
from palaestra.envs.sokoban.game import NAMES, Board, parse_direction

STEP_COST = -0.1
BOX_ON_GOAL = 1.0
SOLVE_BONUS = 10.0
MAX_REFERENCE_CALLS = 14

_LEGEND = ("Legend: # wall, @ you, + you on a goal, $ box, * box on a goal, . goal, space floor. "
           "Rows are listed top to bottom.")


@dataclass
class SokobanState:
    task: Task
    board: Board
    start_on_goals: int
    max_moves: int
    step_rewards: list[float] = field(default_factory=list)
    refused: int = 0


def _split_moves(text: str) -> list[str]:
    """``"up"``, ``"U"``, ``"up, left"``, ``"UUL"`` → ["U", ...]; ValueError names the bad piece."""
    parts = [p for p in re.split(r"[\s,;]+", text.strip()) if p]
    if len(parts) == 1 and re.fullmatch(r"[UDLRudlr]{2,}", parts[0]):
        parts = list(parts[0])
    if not parts:
        raise ValueError("no direction given")
    return [parse_direction(p) for p in parts]


class Sokoban(Environment):
    """Push every box onto a goal using ``move(direction)``."""

    name = "sokoban"
    version = "0.1"
    description = "Sokoban puzzles played move by move through a tool; reward for solving, partial for progress."
    domain = "games"
    mechanism = "multi-turn tools"
    system_prompt = ("You are playing Sokoban. Push every box ($) onto a goal (.) by walking with the move tool. "
                     "You can push one box at a time by walking into it; you cannot pull boxes or push two at "
                     "once. " + _LEGEND + " When every box is on a goal, say so in a final message.")

    def check_task(self, task: Task) -> None:
        level = task.metadata.get("level")
        if not isinstance(level, list) or not all(isinstance(r, str) for r in level):
            raise InvalidTask(f"sokoban task '{task.id}' has no metadata.level",
                              hint='add the board as a list of rows, e.g. ["#####", "#@$.#", "#####"]')
        try:
            board = Board.parse(level)
        except ValueError as exc:
            raise InvalidTask(f"sokoban task '{task.id}': metadata.level: {exc}", hint="fix the level") from None
        if board.solved():
            raise InvalidTask(f"sokoban task '{task.id}': the level is already solved", hint="move a box off its goal")
        solution = task.metadata.get("solution")
        if solution is not None and not (isinstance(solution, str) and re.fullmatch(r"[UDLR]*", solution)):
            raise InvalidTask(f"sokoban task '{task.id}': metadata.solution must be a string of U/D/L/R")

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """Show the starting board under the request (unless the request already holds it)."""
        messages = super().prompt(task)
        self.check_task(task)
        board = Board.parse(task.metadata["level"]).render()
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        last = messages[users[-1]] if users else {}
        if isinstance(last.get("content"), str) and board not in last["content"]:
            messages[users[-1]] = {**last, "content": f"{last['content'].rstrip()}\n\n```\n{board}\n```"}
        return messages

    def seed(self, task: Task) -> SokobanState:
        self.check_task(task)
        board = Board.parse(task.metadata["level"])
        return SokobanState(task, board, board.on_goals(), int(task.metadata.get("max_moves") or 200))

    def _status(self, state: SokobanState) -> str:
        b = state.board
        line = f"Boxes on goals: {b.on_goals()}/{len(b.boxes)}. Moves: {len(b.moves)}."
        return line + (" SOLVED: every box is on a goal." if b.solved() else "")

    @tool
    def move(self, state: SokobanState, direction: str) -> str:
        """Walk one step (pushing a box if one is in the way) and see the new board.

        Args:
            direction: up, down, left or right (or U/D/L/R). Several moves may be given at once,
                separated by spaces or commas, e.g. "up, up, left".
        """
        try:
            steps = _split_moves(direction)
        except ValueError as exc:
            raise ToolError(f"cannot read the move: {exc}",
                            hint='use "up", "down", "left" or "right" (or U/D/L/R)') from None
        b = state.board
        if b.solved():
            raise ToolError("the level is already solved", hint="give your final answer now")
        if len(b.moves) >= state.max_moves:
            raise ToolError(f"the move limit of {state.max_moves} is reached", hint="give your final answer")
        report = []
        for i, d in enumerate(steps):
            if b.solved() or len(b.moves) >= state.max_moves:
                why = "the level is solved" if b.solved() else f"the move limit of {state.max_moves} is reached"
                report.append(f"{len(steps) - i} remaining move(s) ignored: {why}")
                break
            before = b.on_goals()
            moved, pushed = b.move(d)
            if not moved:
                state.refused += 1
                report.append(f"{NAMES[d]}: blocked (a wall, or a box that cannot move)")
                continue
            gain = b.on_goals() - before
            reward = STEP_COST + BOX_ON_GOAL * gain + (SOLVE_BONUS if b.solved() else 0.0)
            state.step_rewards.append(round(reward, 6))
            pushed_text = " and pushed a box" if pushed else ""
            report.append(f"{NAMES[d]}: moved{pushed_text} (step reward {reward:+.1f})")
        return "\n".join(report) + f"\n{b.render()}\n{self._status(state)}"

    @tool
    def look(self, state: SokobanState) -> str:
        """See the current board and how many boxes are on goals."""
        return f"{state.board.render()}\n{self._status(state)}"

    def verify(self, state: SokobanState, trajectory: Trajectory) -> Verdict:
        b = state.board
        n = len(b.boxes)
        remaining = n - state.start_on_goals
        progress = max(0, b.on_goals() - state.start_on_goals) / remaining if remaining else 0.0
        solved = b.solved()
        components = {"solved": float(solved), "boxes_on_goals": b.on_goals() / n, "progress": progress}
        optimal = state.task.metadata.get("solution")
        if optimal:  # only measurable against a known shortest solution
            components["efficiency"] = min(1.0, len(optimal) / len(b.moves)) if solved and b.moves else 0.0
        return Verdict(
            reward=1.0 if solved else 0.5 * progress,
            passed=solved,
            components=components,
            metadata={"moves": "".join(b.moves), "blocked_moves": state.refused,
                      "step_rewards": state.step_rewards, "return": round(sum(state.step_rewards), 6)},
            answer="".join(b.moves),
        )

    def reference(self, task: Task) -> Reference | None:
        solution = task.metadata.get("solution")
        if not isinstance(solution, str) or not solution:
            return None
        # One move per turn, as a careful player would; long solutions are grouped so the oracle fits
        # the tool agent's default step limit.
        size = -(-len(solution) // MAX_REFERENCE_CALLS)
        chunks = [solution[i : i + size] for i in range(0, len(solution), size)]
        calls = [ToolCall(name="move", arguments={"direction": ", ".join(NAMES[d] for d in c)}) for c in chunks]
        return Reference(tool_calls=calls, final_answer="Every box is on a goal: the level is solved.")
