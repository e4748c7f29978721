"""Oracle gate for Harbor and Terminal-Bench 1 tasks (issue 21, item 3).

Imports every Harbor task (``instruction.md``) and Terminal-Bench 1 task (``task.yaml``) under the given
directories, and plays two agents on each through the ``harbor`` environment (image built from the
Dockerfile, tests in the same container): the **oracle** (the task's ``solution/solve.sh``) and a **null**
agent (does nothing). Each play ends as a reward or a typed failure ``failed(kind: reason)``.

The gate: over the tasks whose needs can be met here (the oracle's play did not end in an
``environment`` failure: an image that cannot be built, a host that cannot be reached), the oracle
reaches full reward on at least 95 %, and the null agent's reward is 0 on every one of them (or a typed
failure); every other task is a typed failure with its reason; and no play was ``approximate`` (without an
engine the Dockerfile's steps do not run, so such a play says nothing about the task as meant). Exit
status 0 when the gate holds.

    python bench/harbor_oracle.py tests/fixtures/harbor tests/fixtures/tb1 --base-image palaestra-test-rootfs:4 \
        --build-network none --json out.json

``--base-image``: the local image that stands in for ``FROM`` images this machine lacks (no registry is
reachable); ``--debian-base``: make such bases from Debian's packages (``mmdebstrap`` minbase, and one
with ``python3``) and build on them, with ``RUN`` steps reaching the machine's apt mirror; ``--sandbox``:
``docker`` or ``podman`` (default: whichever answers; neither: approximate runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from palaestra.adapters.harbor import import_harbor
from palaestra.adapters.harbor_env import HarborEnvironment
from palaestra.adapters.terminal_bench import import_terminal_bench
from palaestra.core.errors import InfraError, InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.sandbox.images import debian_bases

GATE = 0.95


@dataclass
class Play:
    reward: float | None = None
    failure: str | None = None  # "kind: reason"
    approximate: bool = False
    base_substituted: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def cell(self) -> str:
        if self.failure:
            return f"failed({self.failure})"
        return f"{self.reward:g}" + (" (approximate)" if self.approximate else "")


async def play(env: HarborEnvironment, task: Task, oracle: bool) -> Play:
    """One episode: seed, the reference's tool calls (oracle) or none (null), verify."""
    start = time.monotonic()
    out = Play()
    state = None
    try:
        state = await env.seed(task)
        ref = env.reference(task) if oracle else None
        for call in ref.tool_calls if ref else []:
            await env.call_tool(state, call.name, call.arguments)
        verdict = await env.verify(state, Trajectory())
        out.reward = verdict.reward
        out.approximate = bool(verdict.metadata.get("approximate"))
        out.base_substituted = (verdict.metadata.get("image") or {}).get("base_substituted", [])
    except InfraError as exc:
        out.failure = f"{exc.failure}: {getattr(exc, 'reason', type(exc).__name__)}"
    finally:
        if state is not None:
            await env.close(state)
    out.seconds = time.monotonic() - start
    return out


def load(roots: list[Path], tasks_dir: Path) -> tuple[list[Task], list[str]]:
    tasks: list[Task] = []
    skipped: list[str] = []
    for root in roots:
        for loader in ("harbor", "tb1"):
            try:
                got = (import_harbor(root, env="harbor") if loader == "harbor" else
                       import_terminal_bench(root, tasks_dir / root.name, env="harbor"))
            except InvalidTask:
                continue
            tasks += got.tasks
            skipped += got.skipped
    return tasks, skipped


async def gate(roots: list[Path], *, sandbox: str | None, base_image: str | None, build_network: str,
               debian_base: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="palaestra-harbor-gate-") as tmp:
        tasks, skipped = load(roots, Path(tmp))
        env = HarborEnvironment(sandbox, base_image=base_image, build_network=build_network)  # type: ignore[arg-type]
        if debian_base and env.engine and env.builder:  # bases made from Debian's packages, built once
            env.builder.base_images.update(await debian_bases(env.engine[1]))
        rows = []
        for task in tasks:
            oracle = await play(env, task, True)
            null = await play(env, task, False)
            rows.append({"task": task.id, "oracle": asdict(oracle), "null": asdict(null),
                         "oracle_cell": oracle.cell(), "null_cell": null.cell()})
    met = [r for r in rows if not (r["oracle"]["failure"] or "").startswith("environment:")]
    full = sum(1 for r in met if r["oracle"]["reward"] == 1.0)
    null_ok = all(r["null"]["failure"] or r["null"]["reward"] == 0.0 for r in met)
    typed = all(r["oracle"]["failure"] or r["oracle"]["reward"] is not None for r in rows)
    share = full / len(met) if met else 0.0
    # an approximate play (no engine: the Dockerfile's steps did not run) says nothing about the task as
    # its author meant it, so a gate over approximations never passes
    approximate = sum(r[who]["approximate"] for r in rows for who in ("oracle", "null"))
    return {"engine": env.engine[0] if env.engine else None, "tasks": len(rows), "needs_met": len(met),
            "oracle_full": full, "oracle_share": share, "null_zero": null_ok, "skipped": skipped, "rows": rows,
            "approximate": approximate, "passed": bool(met) and share >= GATE and null_ok and typed and not approximate}


def table(result: dict[str, Any]) -> str:
    lines = ["| task | oracle | null | base substituted |", "|---|---|---|---|"]
    for r in result["rows"]:
        subs = ", ".join(f"{s['wanted']} → {s['used']}" for s in r["oracle"]["base_substituted"]) or "-"
        lines.append(f"| {r['task']} | {r['oracle_cell']} | {r['null_cell']} | {subs} |")
    lines.append(f"\nengine {result['engine']}: oracle full reward on {result['oracle_full']}/{result['needs_met']} "
                 f"tasks whose needs are met ({result['oracle_share']:.0%}), null 0 on all: {result['null_zero']}; "
                 f"{result['approximate']} approximate plays; gate {'passed' if result['passed'] else 'FAILED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("roots", nargs="+", type=Path, help="directories of Harbor / Terminal-Bench 1 tasks")
    parser.add_argument("--sandbox", default=None, help="docker or podman (default: whichever answers)")
    parser.add_argument("--base-image", default=None, help="local image standing in for missing FROM images")
    parser.add_argument("--build-network", default="host", choices=("host", "none"))
    parser.add_argument("--debian-base", action="store_true",
                        help="make local base images from Debian's packages (mmdebstrap) and build on them")
    parser.add_argument("--json", type=Path, default=None, help="write the full result here")
    args = parser.parse_args(argv)
    result = asyncio.run(gate(args.roots, sandbox=args.sandbox, base_image=args.base_image,
                              build_network=args.build_network, debian_base=args.debian_base))
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
