"""GRPO on a CPU: SmolLM2-135M learns to answer short additions in the asked format, through Palaestra.

Every step samples groups of rollouts from the *current* weights (the local backend serves the very
model being trained: ``TrainableLocalBackend.from_model``), journals them, turns them into ``rl`` export
rows (token ids, loss masks, sampling logprobs, GRPO advantages) and takes a clipped-surrogate step on
them. Held-out tasks (operand pairs never trained on) are scored with fixed sampling seeds before the
first step and after every ``--eval-every`` steps, so the numbers are paired and comparable.

    pip install 'palaestra[train]'    # torch==2.13.0 (CPU build) first, then the extra
    python examples/grpo_cpu.py       # ~8 minutes on 2 idle CPU cores (budget 30 on a busy machine)

Then ``palaestra export rl runs/grpo-cpu-<time> --out rl.parquet`` exports every training rollout it sampled.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from palaestra.agents.single_turn import SingleTurnAgent
from palaestra.core.records import Rollout, Task
from palaestra.models.local.weights import resolve
from palaestra.placement import mount_env
from palaestra.rollout.journal import Journal
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.arith_env import Arith, make_tasks
from palaestra.train.grpo import grpo_update
from palaestra.train.local_policy import TrainableLocalBackend
from palaestra.train.rows import rl_rows


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--tasks-per-step", type=int, default=6)
    p.add_argument("--group", type=int, default=8, help="rollouts per task (the GRPO group)")
    p.add_argument("--heldout", type=int, default=16, help="held-out tasks")
    p.add_argument("--heldout-samples", type=int, default=2, help="samples per held-out task (fixed seeds)")
    p.add_argument("--eval-every", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-6)
    p.add_argument("--minibatches", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--normalisation", default="group", choices=["group", "mean", "batch", "rloo", "none"])
    p.add_argument("--model", default=None, help="an HF model directory (default: the cached SmolLM2-135M)")
    p.add_argument("--out", default=None, help="run directory (default runs/grpo-cpu-<time>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    args.out = args.out or f"runs/grpo-cpu-{time.strftime('%Y%m%d-%H%M%S')}"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    return args


async def sample(tasks: list[Task], seeds: list[int], *, env: Any, proxy: ModelProxy, max_tokens: int,
                 temperature: float = 1.0) -> list[Rollout]:
    """One rollout per (task, seed) through Palaestra's runner, all in flight at once (the engine batches)."""
    agent = SingleTurnAgent()
    counts: dict[str, int] = {}
    jobs = []
    for task, seed in zip(tasks, seeds):
        repeat = counts[task.id] = counts.get(task.id, -1) + 1
        jobs.append(run_rollout(task, env=env, agent=agent, proxy=proxy, model_name="smollm2-grpo",
                                repeat=repeat, sampling={"temperature": temperature, "max_tokens": max_tokens,
                                                         "seed": seed}))
    return list(await asyncio.gather(*jobs))


def mean_reward(rollouts: list[Rollout]) -> float:
    return statistics.fmean(r.reward or 0.0 for r in rollouts if r.reward is not None)


def component(rollouts: list[Rollout], name: str) -> float:
    return statistics.fmean(r.verdict.components.get(name, 0.0) for r in rollouts if r.verdict is not None)


async def main(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    path = Path(args.model) if args.model else resolve(None).path
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    backend = TrainableLocalBackend.from_model(model, tokenizer, name="smollm2-grpo", max_batch=64,
                                               default_max_tokens=args.max_tokens)
    proxy = ModelProxy(backend)
    mounted = await mount_env(Arith(), "direct")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = Path(args.out)
    heldout = [t for t in make_tasks(args.heldout, split="heldout", seed=args.seed)
               for _ in range(args.heldout_samples)]
    heldout_seeds = [10_000 + i for i in range(len(heldout))]  # the same draws at every evaluation
    rng = random.Random(args.seed)
    history: list[tuple[int, float]] = []
    t_start = time.perf_counter()

    async def evaluate(step: int) -> None:
        t0 = time.perf_counter()
        rollouts = await sample(heldout, heldout_seeds, env=mounted.client, proxy=proxy, max_tokens=args.max_tokens)
        history.append((step, mean_reward(rollouts)))
        print(f"  held-out after {step:2d} step(s): mean reward {history[-1][1]:.3f} (format "
              f"{component(rollouts, 'format'):.2f}, correct {component(rollouts, 'correct'):.2f}; "
              f"{len(rollouts)} rollouts, {time.perf_counter() - t0:.0f} s)", flush=True)

    print(f"GRPO on {path.name}: {args.steps} steps x {args.tasks_per_step} tasks x group {args.group}, "
          f"lr {args.lr:g}, advantages '{args.normalisation}', {args.threads} threads", flush=True)
    await evaluate(0)
    async with Journal(out / "rollouts.jsonl") as journal:
        for step in range(1, args.steps + 1):
            t0 = time.perf_counter()
            tasks = [t.model_copy(update={"id": f"s{step}-{t.id}"})
                     for t in make_tasks(args.tasks_per_step, split="train", seed=args.seed * 1000 + step)]
            group = [t for t in tasks for _ in range(args.group)]
            rollouts = await sample(group, [rng.randrange(1 << 31) for _ in group], env=mounted.client,
                                    proxy=proxy, max_tokens=args.max_tokens)
            for r in rollouts:
                await journal.append(r)
            rows, stats = rl_rows(rollouts, normalisation=args.normalisation)
            t1 = time.perf_counter()
            update = await asyncio.to_thread(grpo_update, model, optimizer, rows, pad_id=pad_id,
                                             minibatches=args.minibatches)
            print(f"step {step:2d}: train mean reward {mean_reward(rollouts):.3f} (format "
                  f"{component(rollouts, 'format'):.2f}, correct {component(rollouts, 'correct'):.2f}); "
                  f"{stats.rows} rows, {stats.flat_groups}/{stats.groups} flat groups; loss {update.loss:+.4f}, "
                  f"{update.tokens} tokens, |logprob gap| {update.max_logprob_gap:.1e}; "
                  f"sample {t1 - t0:.0f} s + update {time.perf_counter() - t1:.0f} s", flush=True)
            if step % args.eval_every == 0 or step == args.steps:
                await evaluate(step)
    first, last = history[0][1], history[-1][1]
    print(f"held-out mean reward: {first:.3f} before training -> {last:.3f} after {history[-1][0]} steps "
          f"({last - first:+.3f}); {time.perf_counter() - t_start:.0f} s in all; journal {out / 'rollouts.jsonl'}")
    await mounted.stop()
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main(parse()))
