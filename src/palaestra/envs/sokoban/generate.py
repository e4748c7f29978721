"""Generate small, solvable Sokoban levels with their shortest solutions (``data/examples.jsonl``).

Random rooms are drawn from a seeded generator, solved by breadth-first search, and kept when the
shortest solution is neither trivial nor long. The bundled file is this script's output:

    python -m palaestra.envs.sokoban.generate --count 24 --seed 7 > data/examples.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

from palaestra.envs.sokoban.game import Board, solve

PROMPTS = (
    "Solve this Sokoban level.",
    "Push every box onto a goal.",
    "Here is a Sokoban puzzle. Get all the boxes onto the goals.",
)


def _room(rng: random.Random, height: int, width: int, boxes: int) -> list[str] | None:
    grid = [["#"] * width for _ in range(height)]
    cells = [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    for r, c in cells:
        grid[r][c] = "#" if rng.random() < 0.18 else " "
    floor = [p for p in cells if grid[p[0]][p[1]] == " "]
    if len(floor) < 2 * boxes + 3:
        return None
    picks = rng.sample(floor, 2 * boxes + 1)
    for r, c in picks[:boxes]:
        grid[r][c] = "."
    for r, c in picks[boxes : 2 * boxes]:
        grid[r][c] = "$"
    r, c = picks[-1]
    grid[r][c] = "@"
    return ["".join(row).rstrip() for row in grid]


def generate(count: int, seed: int, min_moves: int = 6, max_moves: int = 14) -> list[dict[str, Any]]:
    """``count`` tasks: half with one box, half with two; deterministic for a given seed."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, ...]] = set()
    while len(rows) < count:
        boxes = 1 if len(rows) < count // 2 else 2
        level = _room(rng, rng.randint(6, 7), rng.randint(6, 8), boxes)
        if level is None or tuple(level) in seen:
            continue
        solution = solve(level, max_states=50_000)
        if solution is None or not min_moves <= len(solution) <= max_moves:
            continue
        seen.add(tuple(level))
        n = len(rows) + 1
        rows.append({
            "id": f"sokoban-{n:03d}", "env": "sokoban", "input": PROMPTS[n % len(PROMPTS)],
            "metadata": {"level": level, "solution": solution, "optimal_moves": len(solution)},
            "tags": [f"boxes-{boxes}"],
        })
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    for row in generate(args.count, args.seed):
        assert Board.parse(row["metadata"]["level"])
        sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
