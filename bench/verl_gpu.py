"""VeRL GRPO on a GPU over a Palaestra environment: VeRL's trainer, vLLM rollout servers, and Palaestra's
agent loop (``palaestra.integrations.verl``) running the multi-turn tool environment inside VeRL's rollout
workers. A figure script, not a test: it needs a GPU, vLLM and VeRL's GPU extras (docs/training.md).

  python bench/verl_gpu.py --check --model PATH       # no GPU: compose + validate the config, load the data
  python bench/verl_gpu.py --model Qwen/Qwen2.5-0.5B-Instruct --steps 20 --out runs/verl
  python bench/verl_gpu.py ... --set actor_rollout_ref.actor.optim.lr=2e-6   # any VeRL override

What it does: writes the environment's train/validation tasks as VeRL parquet (``write_dataset``), an agent
loop config naming ``PalaestraAgentLoop`` with the Palaestra options, and composes VeRL's own
``ppo_trainer`` config with hydra plus the overrides below (GRPO, vLLM, one node). ``--check`` stops after
VeRL's ``validate_config``, the dataclass conversion of the rollout config, loading the parquet through
VeRL's ``RLHFDataset`` and instantiating the agent loop class: everything but the GPU, so a wrong key or an
inconsistent batch size fails on a laptop (CI runs it). Otherwise it calls VeRL's ``run_ppo``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from palaestra.integrations import verl as pverl
from palaestra.train.arith_env import make_tool_tasks

ENVS = {"arith_tools": make_tool_tasks}  # environments with a task generator; more via --tasks FILE


def tasks_for(args: argparse.Namespace) -> tuple[list[Any], list[Any]]:
    if args.tasks:
        from palaestra.rollout.tasks import load_task_file

        loaded = load_task_file(args.tasks)
        if loaded.problems:
            raise SystemExit(f"{args.tasks}: {len(loaded.problems)} row(s) do not load: {loaded.problems[0]}")
        tasks = loaded.tasks
        cut = max(1, len(tasks) // 10)
        return tasks[cut:], tasks[:cut]
    make = ENVS[args.env]
    return make(args.train_n, split="train", seed=args.seed), make(args.val_n, split="heldout", seed=args.seed)


def overrides(args: argparse.Namespace, out: Path) -> list[str]:
    """VeRL's hydra overrides for one-node GRPO with vLLM rollouts and Palaestra's agent loop."""
    verl_file = Path(pverl.__file__).resolve()
    return [
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
        f"data.train_files={out / 'train.parquet'}", f"data.val_files={out / 'val.parquet'}",
        f"data.train_batch_size={args.batch}", f"data.max_prompt_length={args.prompt_length}",
        f"data.max_response_length={args.response_length}", "data.filter_overlong_prompts=True",
        f"actor_rollout_ref.model.path={args.model}", "actor_rollout_ref.model.use_remove_padding=True",
        f"actor_rollout_ref.actor.optim.lr={args.lr}", f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.rollout.prompt_length={args.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={args.response_length}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={args.gpu_memory}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={out / 'agent_loops.yaml'}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={pverl.AGENT_NAME}",
        f"reward.custom_reward_function.path={verl_file}", "reward.custom_reward_function.name=compute_score",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", f"trainer.total_training_steps={args.steps}",
        "trainer.logger=[console]", "trainer.project_name=palaestra", f"trainer.experiment_name={args.env}",
        f"trainer.default_local_dir={out / 'checkpoints'}", "trainer.save_freq=-1",
        f"trainer.test_freq={args.test_freq}", "trainer.val_before_train=True", *args.set,
    ]


def prepare(args: argparse.Namespace, out: Path) -> Any:
    """The dataset, the agent loop config and VeRL's composed config."""
    import verl
    from hydra import compose, initialize_config_dir

    out.mkdir(parents=True, exist_ok=True)
    train, val = tasks_for(args)
    pverl.write_dataset(train, str(out / "train.parquet"))
    pverl.write_dataset(val, str(out / "val.parquet"))
    loop = {"name": pverl.AGENT_NAME, "_target_": "palaestra.integrations.verl.PalaestraAgentLoop",
            "agent": args.agent, "max_steps": args.max_steps, "max_tokens": args.max_tokens,
            "placement": args.placement}
    (out / "agent_loops.yaml").write_text("- " + json.dumps(loop) + "\n")  # JSON is YAML
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides(args, out)), len(train), len(val)


def check(config: Any, out: Path) -> dict[str, Any]:
    """What VeRL checks before it starts Ray, plus the data and the agent loop, without a GPU."""
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.dataset.rl_dataset import RLHFDataset

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    data = RLHFDataset(data_files=[str(out / "train.parquet")], tokenizer=tokenizer,  # type: ignore[arg-type]
                       config=config.data)
    row = data[0]
    task = pverl.task_of(row["extra_info"])
    assert row["agent_name"] == pverl.AGENT_NAME and pverl.AGENT_NAME in _agent_loop_registry
    return {"validated": True, "rows": len(data), "first_task": task.id, "env": task.env,
            "rollout": {"name": rollout.name, "n": rollout.n, "prompt_length": rollout.prompt_length,
                        "response_length": rollout.response_length},
            "adv_estimator": str(config.algorithm.adv_estimator)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="validate config and data without a GPU, then stop")
    ap.add_argument("--model", required=True, help="HF model id or local path (the policy)")
    ap.add_argument("--env", default="arith_tools", choices=sorted(ENVS))
    ap.add_argument("--tasks", help="a tasks file instead of --env's generator (10%% held out for validation)")
    ap.add_argument("--out", type=Path, default=Path("runs/verl"))
    ap.add_argument("--train-n", type=int, default=256)
    ap.add_argument("--val-n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32, help="prompts per step (data.train_batch_size)")
    ap.add_argument("--n", type=int, default=8, help="rollouts per prompt (the GRPO group)")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--prompt-length", type=int, default=1024)
    ap.add_argument("--response-length", type=int, default=512)
    ap.add_argument("--gpu-memory", type=float, default=0.5, help="vLLM's gpu_memory_utilization")
    ap.add_argument("--test-freq", type=int, default=5)
    ap.add_argument("--agent", default="tool")
    ap.add_argument("--max-steps", type=int, default=4, help="model turns per rollout")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per model turn")
    ap.add_argument("--placement", default="direct")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any VeRL override")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    config, n_train, n_val = prepare(args, args.out)
    if args.check:
        report = {**check(config, args.out), "train_tasks": n_train, "val_tasks": n_val,
                  "overrides": len(overrides(args, args.out)), "wall_s": round(time.perf_counter() - t0, 1)}
        print(json.dumps(report))
        return 0
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    run_ppo(config, task_runner_class=TaskRunnerV1)
    print(json.dumps({"done": True, "steps": args.steps, "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
