"""VeRL's own classes run Palaestra environments through ``palaestra.integrations.verl`` on a CPU.

VeRL's ``RLHFDataset`` loads the parquet ``write_dataset`` wrote, VeRL's ``AgentLoopWorker`` (its rollout
worker, built from VeRL's own composed ``ppo_trainer`` config) runs ``PalaestraAgentLoop`` on every row, and
the policy is the real local model behind VeRL's server interface (``PalaestraTokenServer``: token ids in,
token ids out, as VeRL's vLLM server). The batch VeRL gets back must hold exactly the ids the server
sampled and the tool output between them, a mask over the sampled ids only, the server's logprobs, and the
verifier's reward, which VeRL's reward-function loader scoring the final reply through ``compute_score``
must reproduce. No GPU and no vLLM: the GPU loop is ``bench/verl_gpu.py``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from palaestra.train.arith_env import make_tasks, make_tool_tasks

pytestmark = pytest.mark.timeout(1800)  # ~1 min on 2 idle cores; a loaded machine is far slower
VERL_FILE = Path(__file__).resolve().parents[2] / "src" / "palaestra" / "integrations" / "verl.py"


@pytest.fixture(scope="module")
def model_path(local_model_path: Path) -> str:
    pytest.importorskip("verl", reason="verl: VeRL is not installed (the [verl] extra)")
    return str(local_model_path)


def verl_config(model_path: str, data: Path, overrides: tuple[str, ...] | list[str] = ()) -> Any:
    """VeRL's own ``ppo_trainer`` config, composed by hydra as ``python -m verl.trainer.main_ppo`` does."""
    import verl
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        return compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_path}", "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.prompt_length=512", "actor_rollout_ref.rollout.response_length=160",
            f"data.train_files={data}", f"data.val_files={data}", "data.max_prompt_length=512", *overrides])


def load_batch(config: Any, tokenizer: Any, data: Path) -> Any:
    """The batch VeRL's trainer would hand its rollout workers: RLHFDataset rows, VeRL's collate_fn."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(data_files=[str(data)], tokenizer=tokenizer, config=config.data)
    return DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))


def test_rows_load_through_verls_dataset_and_map_back_to_their_tasks(model_path: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from palaestra.core.errors import ConfigError
    from palaestra.integrations.verl import AGENT_NAME, task_of, verl_rows, write_dataset

    tasks = make_tool_tasks(3, split="train", seed=5)
    data = Path(write_dataset(tasks, str(tmp_path / "train.parquet")))
    batch = load_batch(verl_config(model_path, data), AutoTokenizer.from_pretrained(model_path), data)
    rows = batch.non_tensor_batch
    assert len(batch) == 3 and list(rows["agent_name"]) == [AGENT_NAME] * 3
    assert [task_of(info) for info in rows["extra_info"]] == tasks  # the whole task, by id, not by text
    assert [p[-1]["content"] for p in rows["raw_prompt"]] == [t.input for t in tasks]
    assert list(rows["data_source"]) == ["palaestra/arith_tools"] * 3
    with pytest.raises(ConfigError, match="ids repeat"):
        verl_rows([tasks[0], tasks[0]])
    with pytest.raises(ConfigError, match="carries no"):
        task_of({"index": 0})


def test_verls_reward_loader_scores_with_palaestras_verifier(model_path: str, tmp_path: Path) -> None:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from palaestra.integrations.verl import close_environments, verl_rows

    config = verl_config(model_path, tmp_path / "unused.parquet", [
        f"reward.custom_reward_function.path={VERL_FILE}", "reward.custom_reward_function.name=compute_score"])
    score = get_custom_reward_fn(config)  # VeRL loads it from the file path, as its reward manager does
    assert score is not None
    task = make_tasks(1, split="train", seed=2)[0]
    row = verl_rows([task])[0]
    answer = int(task.metadata["answer"])

    async def scores() -> list[dict[str, Any]]:
        try:
            return [await score(data_source=row["data_source"], solution_str=text, ground_truth="",
                                extra_info=row["extra_info"]) for text in (str(answer), str(answer + 1),
                                                                           f"It is {answer}.")]
        finally:
            await close_environments()

    right, wrong, wordy = asyncio.run(scores())
    assert right == {"score": 1.0, "passed": True}  # arith: 0.5 format + 0.5 correct
    assert wrong == {"score": 0.5, "passed": False}
    assert wordy == {"score": 0.5, "passed": False}


def test_verls_agent_loop_worker_runs_multi_turn_tool_rollouts_token_exact(model_path: str, tmp_path: Path) -> None:
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from palaestra.integrations.verl import PalaestraTokenServer, close_environments, write_dataset
    from palaestra.models.local.backend import LocalBackend

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    loops = tmp_path / "agent_loops.yaml"  # VeRL's agent_loop_config_path: hydra passes the keys to the loop
    loops.write_text("- name: palaestra_tools\n  _target_: palaestra.integrations.verl.PalaestraAgentLoop\n"
                     "  tool_choice: [required, none]\n  max_steps: 2\n  max_tokens: 40\n"
                     "  rollout_deadline_s: 1500\n")  # generous: a loaded CPU is slow (a timed-out try re-samples)
    tasks = make_tool_tasks(2, split="train", seed=3)
    data = Path(write_dataset(tasks, str(tmp_path / "train.parquet"), agent_name="palaestra_tools"))
    config = verl_config(model_path, data, [
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        f"reward.custom_reward_function.path={VERL_FILE}", "reward.custom_reward_function.name=compute_score"])
    local = LocalBackend(model_path)
    server = PalaestraTokenServer(local.engine, seed=11)
    worker = AgentLoopWorker(config, llm_client=server)
    batch = load_batch(config, worker.tokenizer, data)
    score = get_custom_reward_fn(config)
    assert score is not None

    async def run() -> tuple[Any, list[float]]:
        try:
            out = await worker.generate_sequences(batch)
            finals = []
            for i in range(len(out)):  # the reward VeRL's loader computes from the final reply's text
                rid = out.non_tensor_batch["palaestra_request_id"][i]
                last = [c for c in server.calls if c["request_id"] == rid][-1]
                text = worker.tokenizer.decode(last["token_ids"], skip_special_tokens=True)
                finals.append((await score(data_source="palaestra/arith_tools", solution_str=text, ground_truth="",
                                           extra_info=batch.non_tensor_batch["extra_info"][i]))["score"])
            return out, finals
        finally:
            await close_environments()
            await local.aclose()
            torch.set_num_threads(threads)

    out, verdicts = asyncio.run(run())
    b, extra = out.batch, out.non_tensor_batch
    assert len(out) == 2 and len(set(extra["palaestra_request_id"])) == 2
    width = b["prompts"].shape[1]
    for i in range(2):
        calls = [c for c in server.calls if c["request_id"] == extra["palaestra_request_id"][i]]
        assert len(calls) == 2 and extra["palaestra_tool_calls"][i] == 1  # more than one turn, a tool ran
        attention = b["attention_mask"][i].tolist()
        prompt = [int(t) for t, a in zip(b["prompts"][i].tolist(), attention[:width]) if a]
        n = int(sum(attention[width:]))
        response = [int(t) for t in b["responses"][i].tolist()[:n]]
        assert prompt == calls[0]["prompt_ids"]  # VeRL's prompt is the server's first prompt, exactly
        first = calls[0]["prompt_ids"] + calls[0]["token_ids"]
        assert calls[1]["prompt_ids"][:len(first)] == first  # the second turn continued the first's ids
        assert prompt + response == calls[1]["prompt_ids"] + calls[1]["token_ids"]  # one exact sequence
        mask = [int(m) for m in b["response_mask"][i].tolist()]
        sampled = calls[0]["token_ids"] + calls[1]["token_ids"]
        assert [t for t, m in zip(response, mask) if m] == sampled  # the mask covers the sampled ids only
        g0 = len(calls[0]["token_ids"])
        assert mask[:g0] == [1] * g0 and mask[g0] == 0 and sum(mask) == len(sampled) < n
        assert not any(mask[n:])
        logprobs = b["rollout_log_probs"][i].tolist()
        recorded = calls[0]["logprobs"] + calls[1]["logprobs"]
        assert max(abs(lp - r) for lp, r in zip([v for v, m in zip(logprobs, mask) if m], recorded)) < 1e-6
        rm = b["rm_scores"][i].tolist()  # VeRL's token-level reward: the verifier's, on the last token
        assert rm[n - 1] == pytest.approx(verdicts[i]) and sum(rm) == pytest.approx(verdicts[i])
        assert extra["__num_turns__"][i] >= 4  # user, assistant (call), tool, assistant (answer)


def test_the_gpu_scripts_check_mode_validates_its_config_without_a_gpu(model_path: str, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``bench/verl_gpu.py --check``: VeRL composes and validates the GRPO config and loads the data."""
    import importlib.util
    import json

    from hydra.errors import ConfigCompositionException

    spec = importlib.util.spec_from_file_location("verl_gpu", VERL_FILE.parents[3] / "bench" / "verl_gpu.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small = ["--model", model_path, "--train-n", "8", "--val-n", "4", "--batch", "4", "--n", "2",
             "--micro-batch", "2", "--out", str(tmp_path / "run")]
    assert bench.main(["--check", *small]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["validated"] is True and report["rows"] == 8 and report["env"] == "arith_tools"
    assert report["rollout"] == {"name": "vllm", "n": 2, "prompt_length": 1024, "response_length": 512}
    assert report["adv_estimator"] == "grpo"
    with pytest.raises(ConfigCompositionException):  # a key VeRL does not have fails here, not on the GPU
        bench.main(["--check", *small, "--set", "actor_rollout_ref.rollout.no_such_key=1"])
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):  # so does a batch VeRL's validation refuses
        bench.main(["--check", *small, "--set", "actor_rollout_ref.actor.ppo_mini_batch_size=64"])
