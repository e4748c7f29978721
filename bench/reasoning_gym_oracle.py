"""The reasoning-gym oracle gate: every dataset's reference answer, scored by the dataset's own scorer.

For each reasoning-gym dataset (``composite`` with a two-dataset config), ``--size`` rows are generated
(seed ``--seed``), checked, and the environment's ``reference`` is verified. A dataset whose entries carry
no answer the scorer accepts (and no solution in their metadata) is listed as ``no_reference`` and left
out of the gate; every other dataset must reach a mean oracle reward of ``--gate`` (0.99).

Rows can cross processes: ``--write-rows FILE`` saves the generated rows, ``--rows FILE`` verifies rows
another process wrote (run the two with different ``PYTHONHASHSEED`` values to check that generation does
not depend on the hash seed).

    python bench/reasoning_gym_oracle.py                                  # all datasets, 3 rows each
    python bench/reasoning_gym_oracle.py --datasets gcd,ransom_note --size 2 --json
    python bench/reasoning_gym_oracle.py --tiny                           # a smoke run

Exit status: 0 when the gate holds, 1 when a dataset with a reference is below it, 2 without reasoning-gym.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# --tiny: the hash-seed-dependent generators, one drawing from numpy's global state, composite, a dataset
# whose reference comes from its metadata, one without a reference, and a plain one.
TINY = ["isomorphic_strings", "polynomial_multiplication", "ransom_note", "codeio", "composite", "graph_color",
        "boxnet", "leg_counting"]
COMPOSITE = {"datasets": [{"name": "chain_sum", "weight": 1, "config": {}},
                          {"name": "isomorphic_strings", "weight": 1, "config": {}}]}


@dataclass
class Row:
    """One dataset's result."""

    dataset: str
    rows: int = 0
    scored: int = 0
    rewards: list[float] = field(default_factory=list)
    no_reference: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def mean(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    def status(self) -> str:
        if self.errors:
            return "error"
        if not self.rewards:
            return "no_reference"
        return "ok"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("rewards")
        return {**out, "oracle": self.mean, "status": self.status()}


def generate(datasets: list[str], size: int, seed: int) -> list[Any]:
    from palaestra.envs.reasoning_gym.env import ReasoningGym

    tasks = []
    for name in datasets:
        try:
            tasks += ReasoningGym.generate_tasks(name, size, seed, COMPOSITE if name == "composite" else None)
        except Exception as exc:
            print(f"{name}: cannot generate: {type(exc).__name__}: {exc}", file=sys.stderr)
    return tasks


def evaluate(tasks: list[Any], datasets: list[str]) -> dict[str, Row]:
    """Each row checked, its reference verified; results by dataset."""
    from palaestra.core.records import Trajectory
    from palaestra.envs.reasoning_gym.env import ReasoningGym

    env = ReasoningGym()
    table = {name: Row(name) for name in datasets}
    try:
        for task in tasks:
            row = table.setdefault(task.metadata["dataset"], Row(task.metadata["dataset"]))
            row.rows += 1
            try:
                env.check_task(task)
                ref = env.reference(task)
                if ref is None:
                    row.no_reference += 1
                    continue
                verdict = env.verify(task, Trajectory(final_answer=ref.final_answer))
                row.scored += 1
                row.rewards.append(verdict.reward)
            except Exception as exc:
                row.errors.append(f"{task.id}: {type(exc).__name__}: {exc}"[:300])
    finally:
        env.close_all()
    for row in table.values():
        if not row.rows:
            row.errors.append("no rows generated")
    return table


def render(table: dict[str, Row]) -> str:
    lines = ["| dataset | rows | scored | oracle | status |", "|---|---|---|---|---|"]
    for row in sorted(table.values(), key=lambda r: r.dataset):
        mean = "-" if row.mean is None else f"{row.mean:.3f}"
        lines.append(f"| {row.dataset} | {row.rows} | {row.scored} | {mean} | {row.status()} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", help="comma-separated dataset names (default: all)")
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--gate", type=float, default=0.99)
    parser.add_argument("--rows", type=Path, help="verify rows from this JSONL instead of generating")
    parser.add_argument("--write-rows", type=Path, help="also write the generated rows here")
    parser.add_argument("--tiny", action="store_true", help="the TINY sample, one row each (a smoke run)")
    parser.add_argument("--json", action="store_true", help="one JSON object per dataset on stdout")
    args = parser.parse_args(argv)
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        print("reasoning-gym is not installed (pip install reasoning-gym)", file=sys.stderr)
        return 2
    from palaestra.core.records import Task

    names = args.datasets.split(",") if args.datasets else TINY if args.tiny else sorted(DATASETS)
    if args.tiny:
        args.size = 1
    started = time.monotonic()
    if args.rows:
        tasks = [Task.model_validate_json(line) for line in args.rows.read_text().splitlines() if line.strip()]
        tasks = [t for t in tasks if t.metadata.get("dataset") in names]
    else:
        tasks = generate(names, args.size, args.seed)
    if args.write_rows:
        args.write_rows.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    table = evaluate(tasks, names)
    gated = [r for r in table.values() if r.status() != "no_reference"]
    failing = [r.dataset for r in gated if r.errors or (r.mean or 0.0) < args.gate]
    if args.json:
        for row in sorted(table.values(), key=lambda r: r.dataset):
            print(json.dumps(row.as_dict()))
    else:
        print(render(table))
    rewards = [x for r in gated for x in r.rewards]
    no_ref = sorted(r.dataset for r in table.values() if r.status() == "no_reference")
    print(f"# {len(table)} datasets, {len(tasks)} rows, oracle {sum(rewards) / max(len(rewards), 1):.4f} over "
          f"{len(rewards)} scored rows of {len(gated)} gated datasets; no_reference: {', '.join(no_ref) or '-'}; "
          f"below the gate: {', '.join(failing) or '-'}; {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
