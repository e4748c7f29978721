"""Sokoban rules: a board, moves that push boxes, and a breadth-first solver for small levels.

Levels use the standard text notation: ``#`` wall, ``@`` player, ``+`` player on a goal, ``$`` box,
``*`` box on a goal, ``.`` goal, space floor. A move is one of U, D, L, R; pushing a box into a wall or
another box is not allowed (the move is refused, not lost).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

DIRS: dict[str, tuple[int, int]] = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
NAMES = {"U": "up", "D": "down", "L": "left", "R": "right"}
_ALIASES = {"u": "U", "up": "U", "n": "U", "north": "U", "d": "D", "down": "D", "s": "D", "south": "D",
            "l": "L", "left": "L", "w": "L", "west": "L", "r": "R", "right": "R", "e": "R", "east": "R"}

Pos = tuple[int, int]


def parse_direction(text: str) -> str:
    """``"up"``, ``"U"``, ``"north"`` … → ``"U"``; ValueError for anything else."""
    key = text.strip().lower()
    if key not in _ALIASES:
        raise ValueError(f"{text!r} is not a direction")
    return _ALIASES[key]


@dataclass
class Board:
    walls: frozenset[Pos]
    goals: frozenset[Pos]
    boxes: set[Pos]
    player: Pos
    height: int
    width: int
    moves: list[str] = field(default_factory=list)
    pushes: int = 0

    @classmethod
    def parse(cls, rows: list[str]) -> Board:
        """Read a level; ValueError when it has no player, two players, or boxes ≠ goals."""
        walls, goals, boxes, players = set(), set(), set(), []
        for r, line in enumerate(rows):
            for c, ch in enumerate(line):
                if ch == "#":
                    walls.add((r, c))
                if ch in ".+*":
                    goals.add((r, c))
                if ch in "$*":
                    boxes.add((r, c))
                if ch in "@+":
                    players.append((r, c))
                if ch not in "#.+*$@ ":
                    raise ValueError(f"unknown level character {ch!r} at row {r}, column {c}")
        if len(players) != 1:
            raise ValueError(f"a level needs exactly one player (@ or +), found {len(players)}")
        if not boxes or len(boxes) != len(goals):
            raise ValueError(f"a level needs as many boxes as goals (found {len(boxes)} and {len(goals)})")
        width = max((len(x) for x in rows), default=0)
        return cls(frozenset(walls), frozenset(goals), boxes, players[0], len(rows), width)

    def solved(self) -> bool:
        return self.boxes <= self.goals

    def on_goals(self) -> int:
        return len(self.boxes & self.goals)

    def move(self, d: str) -> tuple[bool, bool]:
        """Apply one move; returns (moved, pushed a box). A blocked move changes nothing."""
        dr, dc = DIRS[d]
        nxt = (self.player[0] + dr, self.player[1] + dc)
        if nxt in self.walls:
            return False, False
        pushed = False
        if nxt in self.boxes:
            beyond = (nxt[0] + dr, nxt[1] + dc)
            if beyond in self.walls or beyond in self.boxes:
                return False, False
            self.boxes.remove(nxt)
            self.boxes.add(beyond)
            pushed = True
            self.pushes += 1
        self.player = nxt
        self.moves.append(d)
        return True, pushed

    def render(self) -> str:
        lines = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                p = (r, c)
                if p in self.walls:
                    row.append("#")
                elif p == self.player:
                    row.append("+" if p in self.goals else "@")
                elif p in self.boxes:
                    row.append("*" if p in self.goals else "$")
                else:
                    row.append("." if p in self.goals else " ")
            lines.append("".join(row).rstrip())
        return "\n".join(lines)


def play(rows: list[str], moves: str) -> Board:
    """The board after playing ``moves`` (blocked moves are skipped, as in the game)."""
    board = Board.parse(rows)
    for d in moves:
        board.move(d)
    return board


def solve(rows: list[str], max_states: int = 200_000) -> str | None:
    """A shortest solution (fewest moves) by breadth-first search, or None if there is none within
    ``max_states`` positions. Fine for the small bundled levels; not meant for large ones."""
    board = Board.parse(rows)
    start = (board.player, frozenset(board.boxes))
    parent: dict[tuple[Pos, frozenset[Pos]], tuple[tuple[Pos, frozenset[Pos]], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        if boxes <= board.goals:
            path = []
            cur: tuple[Pos, frozenset[Pos]] | None = state
            while cur is not None and parent[cur] is not None:
                prev = parent[cur]
                assert prev is not None
                cur, step = prev
                path.append(step)
            return "".join(reversed(path))
        for d, (dr, dc) in DIRS.items():
            nxt = (player[0] + dr, player[1] + dc)
            if nxt in board.walls:
                continue
            new_boxes = boxes
            if nxt in boxes:
                beyond = (nxt[0] + dr, nxt[1] + dc)
                if beyond in board.walls or beyond in boxes:
                    continue
                new_boxes = (boxes - {nxt}) | {beyond}
            key = (nxt, new_boxes)
            if key not in parent:
                parent[key] = (state, d)
                if len(parent) > max_states:
                    return None
                queue.append(key)
    return None
