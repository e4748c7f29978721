"""Write reasoning-gym task rows (JSONL) from dataset recipes; the bundled examples are its output:

    python -m palaestra.envs.reasoning_gym.generate > src/palaestra/envs/reasoning_gym/data/examples.jsonl
    python -m palaestra.envs.reasoning_gym.generate --dataset chain_sum --size 100 --seed 1 > chain_sum.jsonl

Rows hold the question (for reading) and the recipe (dataset, seed, index, size, config); the
environment regenerates the entry from the recipe to score an answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from palaestra.envs.reasoning_gym.env import ReasoningGym

# The bundled sample: a few small, quick datasets of different kinds, three rows each.
BUNDLED: list[tuple[str, int, int, dict[str, Any]]] = [
    ("leg_counting", 3, 42, {}),
    ("basic_arithmetic", 3, 42, {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 2}),
    ("chain_sum", 3, 42, {}),
    ("word_sorting", 3, 42, {}),
    ("spell_backward", 3, 42, {}),
    ("gcd", 3, 42, {}),
    ("letter_counting", 3, 42, {}),
    ("family_relationships", 3, 42, {}),
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write reasoning-gym task rows as JSONL to stdout.")
    parser.add_argument("--dataset", help="a reasoning-gym dataset name (default: the bundled sample)")
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--config", default="{}", help="the dataset's config as JSON")
    args = parser.parse_args(argv)
    recipes = [(args.dataset, args.size, args.seed, json.loads(args.config))] if args.dataset else BUNDLED
    for dataset, size, seed, config in recipes:
        for task in ReasoningGym.generate_tasks(dataset, size, seed, config):
            sys.stdout.write(json.dumps(task.model_dump(exclude_none=True), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
