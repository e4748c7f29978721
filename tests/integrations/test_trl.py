"""TRL's GRPOTrainer trains the real local model through ``palaestra.integrations.trl`` on a multi-turn tool
environment (``arith_tools``: call ``add``, read the result, answer): the ids the trainer trains on are the
ids the backend recorded, the loss mask covers exactly the sampled tokens, the sampling logprobs are the
model's, and every rollout took more than one turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from palaestra.core.records import Rollout
from palaestra.train.arith_env import make_tool_tasks

pytestmark = pytest.mark.timeout(1800)  # ~1-2 min on 2 idle cores; a loaded machine is far slower


@pytest.fixture(scope="module")
def model_path(local_model_path: Path) -> str:
    pytest.importorskip("trl", reason="trl: TRL is not installed (the [trl] extra)")
    return str(local_model_path)


def _unpad(ids: Any, mask: Any) -> list[int]:
    return [int(t) for t, m in zip(ids.tolist(), mask.tolist()) if m]


def test_grpo_trainer_trains_on_the_exact_multi_turn_tokens(model_path: str, tmp_path: Any) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from palaestra.integrations.trl import PalaestraRollouts, palaestra_reward

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one engine thread and the trainer share the CPUs; spinning OpenMP threads fight
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    rollouts = PalaestraRollouts(make_tool_tasks(2, split="train", seed=3), tool_choice=["required", "none"],
                                 max_steps=2, max_tokens=40, temperature=1.0, seed=1)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=2,
                      learning_rate=1e-5, beta=0.0, use_cpu=True, bf16=False, report_to="none", logging_steps=1,
                      save_strategy="no", dataloader_num_workers=0, seed=0, gradient_checkpointing=False)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=rollouts.dataset(),
                          reward_funcs=[palaestra_reward], rollout_func=rollouts)
    seen: list[tuple[dict[str, Any], list[Rollout | None], torch.Tensor]] = []
    original = trainer._generate_and_score_completions

    def spy(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = original(inputs)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():  # the weights the batch was sampled with: before this step's update
            logits = trainer.model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        lps = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        seen.append((out, list(rollouts.last_batch), lps[:, out["prompt_ids"].shape[1] - 1:]))
        return out

    trainer._generate_and_score_completions = spy  # type: ignore[method-assign]
    try:
        trainer.train()
    finally:
        rollouts.close()
        torch.set_num_threads(threads)

    assert len(seen) == 2 and rollouts.stats.calls == 2
    assert rollouts.stats.dropped == 0 and rollouts.stats.rollouts == 4
    for out, batch, new_lps in seen:
        assert len(batch) == 2 and all(r is not None for r in batch)
        for i, rollout in enumerate(batch):
            assert rollout is not None and rollout.outcome.status == "scored"
            calls = rollout.trajectory.model_calls
            assert len(calls) == 2 and len(rollout.trajectory.tool_calls) == 1  # more than one turn, a tool ran
            assert calls[1].response["palaestra"]["continued"] is True  # type: ignore[index]
            # trainer-side ids are the backend's ids: the first prompt, then everything after it
            prompt = _unpad(out["prompt_ids"][i], out["prompt_mask"][i])
            assert prompt == calls[0].prompt_token_ids
            completion = _unpad(out["completion_ids"][i], out["completion_mask"][i])
            first = (calls[0].prompt_token_ids or []) + (calls[0].generation_token_ids or [])
            assert calls[1].prompt_token_ids[:len(first)] == first  # type: ignore[index]
            assert prompt + completion == (calls[1].prompt_token_ids or []) + (calls[1].generation_token_ids or [])
            # the loss mask is 1 exactly on the sampled ids, 0 on the tool output between the turns
            n = len(completion)
            mask = [int(m) for m in out["tool_mask"][i].tolist()[:n]]
            generated = [t for c in calls for t in c.generation_token_ids or []]
            assert [t for t, m in zip(completion, mask) if m] == generated
            assert sum(mask) == len(generated) < n
            g0 = len(calls[0].generation_token_ids or [])
            assert mask[:g0] == [1] * g0 and mask[g0] == 0
            # the sampling logprobs the trainer holds are the model's at those positions
            recorded = out["sampling_per_token_logps"][i].tolist()[:n]
            gaps = [abs(recorded[j] - float(new_lps[i, j])) for j in range(n) if mask[j]]
            assert max(gaps) < 2e-3, f"sampling logprobs differ from the trainer's forward pass by {max(gaps):.1e}"
    logged = [h for h in trainer.state.log_history if "rewards/palaestra_reward/mean" in h]
    assert len(logged) == 2 and all(h["palaestra/turns_mean"] == 2.0 for h in logged)
