"""TRL's GRPOTrainer on a CPU through Palaestra: SmolLM2-135M learns a two-turn tool task (``arith_tools``).

Each rollout is a real multi-turn episode run by Palaestra: the model calls the environment's ``add`` tool
(the first turn is a constrained tool call), reads the result, and answers; the environment's verifier
gives the reward (0.5 for replying with the bare number, 0.5 for the right sum). TRL trains on the exact
ids the policy sampled, tool output masked out (``env_mask``). There is no glue here beyond
``palaestra.integrations.trl``: the dataset, the rollout function and the reward function all come from it.
Held-out tasks (operand pairs never trained on) are scored before and after training with fixed seeds.

    pip install torch==2.13.0 && pip install 'palaestra[trl]'
    python examples/trl_grpo.py          # ~10 minutes on a busy 2-core machine (docs/training.md)

Unsloth: load the model with ``FastLanguageModel.from_pretrained(...)`` instead of ``AutoModelForCausalLM``;
everything else is the same.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from palaestra.integrations.trl import PalaestraRollouts, palaestra_reward
from palaestra.models.local.weights import resolve
from palaestra.train.arith_env import make_tool_tasks


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("--group", type=int, default=4, help="rollouts per task (num_generations)")
    p.add_argument("--heldout", type=int, default=4, help="held-out tasks, 2 fixed-seed samples each")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--max-tokens", type=int, default=40, help="per turn; a tool call takes ~36")
    p.add_argument("--model", default=None, help="an HF model directory (default: the cached SmolLM2-135M)")
    p.add_argument("--out", default="runs/trl-grpo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    return p.parse_args()


def main(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    path = args.model or str(resolve(None).path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    train = make_tool_tasks(args.steps * args.tasks_per_step, split="train", seed=args.seed)
    heldout = make_tool_tasks(args.heldout, split="heldout", seed=args.seed)
    rollouts = PalaestraRollouts(train, tool_choice=["required", "none"], max_steps=2, max_tokens=args.max_tokens,
                                 temperature=1.0, seed=args.seed)
    config = GRPOConfig(output_dir=args.out, per_device_train_batch_size=args.tasks_per_step * args.group,
                        num_generations=args.group, max_steps=args.steps, learning_rate=args.lr,
                        lr_scheduler_type="constant", beta=0.0, use_cpu=True, bf16=False,
                        gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no",
                        seed=args.seed)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=rollouts.dataset(),
                          reward_funcs=[palaestra_reward], rollout_func=rollouts)
    print(f"TRL GRPO on {os.path.basename(path)}: {args.steps} steps x {args.tasks_per_step} tasks x group "
          f"{args.group}, lr {args.lr:g}, {args.threads} threads", flush=True)
    t0 = time.perf_counter()
    before = rollouts.evaluate(heldout, k=2, trainer=trainer)
    print(f"held-out before: mean reward {before['mean_reward']:.3f} ({before['scored']} scored, "
          f"{before['failed']} failed, {before['turns']:.1f} turns; {time.perf_counter() - t0:.0f} s)", flush=True)
    t1 = time.perf_counter()
    try:
        trainer.train()
        train_s = time.perf_counter() - t1
        for h in trainer.state.log_history:
            if "reward" in h:
                print(f"step {h['step']:2d}: train reward {h['reward']:.3f} (std {h['reward_std']:.3f}), "
                      f"turns {h.get('palaestra/turns_mean', float('nan')):.1f}, "
                      f"tool calls {h.get('palaestra/tool_calls_mean', float('nan')):.1f}, "
                      f"loss {h.get('loss', 0.0):+.4f}")
        after = rollouts.evaluate(heldout, k=2)
    finally:
        rollouts.close()
    stats = rollouts.stats
    print(f"held-out after {args.steps} steps: mean reward {after['mean_reward']:.3f} ({after['scored']} scored, "
          f"{after['failed']} failed)")
    print(f"held-out mean reward: {before['mean_reward']:.3f} before -> {after['mean_reward']:.3f} after "
          f"({after['mean_reward'] - before['mean_reward']:+.3f}); training {train_s:.0f} s, "
          f"{time.perf_counter() - t0:.0f} s in all; {stats.rollouts} rollouts, {stats.resampled} re-sampled, "
          f"{stats.dropped} dropped")


if __name__ == "__main__":
    main(parse())
