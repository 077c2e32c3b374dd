"""
Each loss term of the asynchronous trainer at its own sampling temperature (`_trl.async_trainer.LossTemperatures` and
the collator column it reads; docs/async.md), on CPU without vLLM: TRL's real fused LM head (`add_fused_lm_head`, as
`AsyncGRPOTrainer` adds it) on a tiny GPT-2 and a tiny Llama, TRL's real prefix-tree packing and rollout collator.
(The trainer against the real engine: tests/test_async_real.py, `make test-vllm`.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_curriculum.training._trl.async_trainer import LOSS_TEMPERATURE, LossTemperatures, _with_loss_temperatures
from grpo_curriculum.training._trl.async_worker import SAMPLED_TEMPERATURE

VOCAB = 50


def _model(kind: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    else:
        model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64))
    with torch.no_grad():  # logits far from uniform, so that temperatures differ clearly
        model.get_output_embeddings().weight.mul_(8.0)
    return model.eval()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_each_term_is_scored_at_its_own_temperature_even_on_a_shared_position(kind):
    """Terms of three temperatures, two of them on one position (TRL's prefix tree shares a position between samples
    that agree on a token and the next): each term's log-probability and entropy are the model's at its own
    temperature; with TRL's head alone (every term at `args.temperature`) they are not."""
    from trl.trainer.utils import add_fused_lm_head

    model = _model(kind)
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))  # as AsyncGRPOTrainer does
    heads = LossTemperatures(model, temperature=1.0)
    labels = torch.cat([ids[0, 1:], torch.tensor([-100])]).unsqueeze(0)  # position p predicts token p + 1
    index = torch.tensor([2, 5, 5, 7, 9, 10])
    temperatures = torch.tensor([1.0, 0.4, 1.0, 0.4, 1.7, 1.0], dtype=torch.float64)
    heads.plan = (index, temperatures)
    output = model(input_ids=ids, shift_labels=labels, fused_lm_head=True)
    assert heads.head_passes == 3 and heads.body_passes == 1
    for term, (position, temperature) in enumerate(zip(index.tolist(), temperatures.tolist(), strict=True)):
        expected = torch.log_softmax(logits[position] / temperature, dim=-1)
        assert torch.allclose(output.log_probs[0, term], expected[ids[0, position + 1]], atol=1e-5), term
        entropy = -(expected.exp() * expected).sum()
        assert torch.allclose(output.entropy[0, term], entropy, atol=1e-4), term
    heads.plan = None  # without a plan (or without `fused_lm_head`) the forward is TRL's, at `args.temperature`
    plain = model(input_ids=ids, shift_labels=labels, fused_lm_head=True)
    at_one = torch.log_softmax(logits, dim=-1)[torch.arange(11), ids[0, 1:]]
    assert torch.allclose(plain.log_probs[0, :11], at_one, atol=1e-5)
    assert not torch.allclose(plain.log_probs[0, index], output.log_probs[0], atol=1e-2)  # the naive loss differs
    assert torch.allclose(model(input_ids=ids).logits[0], logits, atol=1e-5)  # generation's forward untouched


def test_the_gradient_reaches_the_model_through_every_temperature():
    from trl.trainer.utils import add_fused_lm_head

    model = _model("gpt2").train()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    heads = LossTemperatures(model, temperature=1.0)
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(2))
    labels = torch.cat([ids[0, 1:], torch.tensor([-100])]).unsqueeze(0)
    grads = []
    for temperatures in ([0.5, 0.5], [0.5, 2.0]):
        model.zero_grad()
        heads.plan = (torch.tensor([3, 3]), torch.tensor(temperatures, dtype=torch.float64))
        model(input_ids=ids, shift_labels=labels, fused_lm_head=True).log_probs[0, 1].backward()
        grads.append(model.get_output_embeddings().weight.grad.clone())
    assert grads[0].abs().sum() > 0 and not torch.allclose(grads[0], grads[1])  # term 1's own temperature


def _mixed_batch(kind: str, peft: bool = False):
    """A model (training mode) with TRL's fused head and `LossTemperatures` (PEFT's LoRA wrapped around it after the
    head, as TRL's trainer does), and a micro-batch of terms at three temperatures, two of them on a shared position."""
    from trl.trainer.utils import add_fused_lm_head

    model = _model(kind).train()
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))  # as AsyncGRPOTrainer does
    if peft:
        from peft import LoraConfig, get_peft_model

        targets = ["c_attn"] if kind == "gpt2" else ["q_proj", "v_proj"]
        model = get_peft_model(model, LoraConfig(r=4, target_modules=targets, init_lora_weights=False))
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(4))
    labels = torch.cat([ids[0, 1:], torch.tensor([-100])]).unsqueeze(0)
    temperatures = torch.tensor([1.0, 0.4, 1.0, 0.4, 1.7, 1.0, 0.4], dtype=torch.float64)
    return model, ids, labels, (torch.tensor([1, 3, 4, 4, 7, 9, 10]), temperatures)


def _mixed_loss(model, heads, ids, labels, plan):
    heads.plan = plan
    try:
        output = model(input_ids=ids, shift_labels=labels, fused_lm_head=True)
    finally:
        heads.plan = None
    weights = torch.linspace(0.5, 1.5, len(plan[0]))  # terms weighted unequally, entropy in it too
    return -(output.log_probs[0] * weights).sum() + 0.1 * output.entropy[0].sum()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_micro_batch_of_three_temperatures_runs_the_body_once(kind):
    """Issue 51 item 4: the model's body (TRL's backbone, `base_model`) runs forward once for a micro-batch whose terms
    hold three temperatures; TRL's head is applied once per temperature on its hidden states."""
    model, ids, labels, plan = _mixed_batch(kind)
    heads = LossTemperatures(model, temperature=1.0)
    calls = []
    model.base_model.register_forward_hook(lambda *_: calls.append(1))
    _mixed_loss(model, heads, ids, labels, plan).backward()
    assert len(calls) == 1
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kind,peft", [("gpt2", False), ("llama", False), ("llama", True)])
def test_one_body_pass_gives_the_losses_and_gradients_of_a_pass_per_temperature(kind, peft):
    """The loss and every gradient equal those of the implementation before issue 51 (the whole fused forward once per
    temperature: `PerTemperaturePasses` of benchmarks/loss_temperatures.py) within 1e-5 relative, PEFT's LoRA too."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from loss_temperatures import PerTemperaturePasses

    losses, grads = [], []
    for kind_of_heads in (PerTemperaturePasses, LossTemperatures):
        model, ids, labels, plan = _mixed_batch(kind, peft)
        heads = kind_of_heads(model, temperature=1.0)
        loss = _mixed_loss(model, heads, ids, labels, plan)
        loss.backward()
        assert (heads.head_passes, heads.body_passes) == (3, 3 if kind_of_heads is PerTemperaturePasses else 1)
        losses.append(float(loss.detach()))
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert grads[0].keys() == grads[1].keys() and (not peft or all("lora_" in n for n in grads[0]))
    scale = max(float(g.abs().max()) for g in grads[0].values())
    for name, grad in grads[0].items():
        assert float((grads[1][name] - grad).abs().max()) <= 1e-5 * scale, name


def _sample(prompt, completion, temperature, group):
    ids = np.array(prompt + completion)
    mask = np.array([0] * len(prompt) + [1] * len(completion))
    return {"input_ids": ids, "completion_mask": mask, "old_log_probs": np.zeros(len(ids)), "advantage": 1.0,
            "group_id": group, "metrics": {SAMPLED_TEMPERATURE: temperature, "reward": 0.0}}


def test_the_collator_gives_each_loss_term_its_samples_temperature():
    """TRL's tree packing and rollout collator on two rows (two processes); samples of one prompt at two temperatures
    share their prompt and the first completion token (so a position serves terms of both temperatures)."""
    from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout
    from trl.experimental.async_grpo.packing import TreeRow

    rows = [TreeRow(), TreeRow()]
    samples = [[_sample([1, 2, 3], [4, 5, 6], 1.0, 0), _sample([1, 2, 3], [4, 5, 7], 0.4, 1),
                _sample([1, 2, 3], [8, 9], 0.4, 1)], [_sample([7, 7], [3, 3, 3, 3], 0.7, 2)]]  # fmt: skip
    for row, held in zip(rows, samples, strict=True):
        for sample in held:
            row.add(sample)
    collate = _with_loss_temperatures(DataCollatorForRollout(pad_token_id=0, num_processes=2), default=1.0)
    batch = collate([rows])
    temperatures, index, segment = batch[LOSS_TEMPERATURE], batch["token_index"], batch["segment_id"]
    assert temperatures.shape == index.shape and temperatures.dtype == torch.float64
    for r, held in enumerate(samples):
        terms = index[r] >= 0
        expected = [held[s]["metrics"][SAMPLED_TEMPERATURE] for s in segment[r, terms].tolist()]
        assert temperatures[r, terms].tolist() == expected
        assert len(expected) == sum(int(s["completion_mask"].sum()) for s in held)
    shared = index[0, index[0] >= 0].tolist()
    assert len(shared) != len(set(shared))  # a shared position, serving terms of both temperatures


def test_under_fsdp2_each_process_runs_the_body_once_and_the_gradient_is_exact(tmp_path):
    """Real FSDP2 on two CPU processes (`torchrun`, gloo; tests/fsdp_heads_probe.py): rank 0's micro-batch holds two
    temperatures, rank 1's three. Each process runs the sharded body once and TRL's head once per temperature of its
    own (the body's gathers run once on each, and the head's weight is gathered once if it is left sharded, so the
    processes need not agree on their temperatures), and each sharded gradient, gathered, is the unsharded model's mean gradient over both micro-batches with
    a whole forward per temperature (the implementation before issue 51, which ran three passes on each process)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    project = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(project), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(project / "tests" / "fsdp_heads_probe.py"), str(tmp_path)]  # fmt: skip
    try:
        done = subprocess.run(command, env=env, cwd=project, capture_output=True, text=True, timeout=180, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the two processes hung: they ran different numbers of collectives over a sharded model")
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    for r, rank in enumerate(ranks):
        assert rank["sharded"] and rank["head_passes"] == 2 + r and rank["body_passes"] == rank["body_calls"] == 1, rank
        assert rank["loss"] == pytest.approx(rank["reference"], rel=1e-5)
        assert rank["head_is_dtensor"] and rank["head_sharded_head_passes"] == 2 + r, rank
        assert rank["head_sharded_loss"] == pytest.approx(rank["reference"], rel=1e-5)
        assert max(rank["gaps"].values()) < 1e-5 * rank["grad_scale"], rank["gaps"]


def test_a_single_stage_ramp_trains_each_sample_at_the_temperature_it_was_sampled_at(tmp_path, tiny_model_dir,
                                                                                   monkeypatch):
    """
    Issue 55, item 1: a one-stage temperature ramp whose start is `args.temperature` (as a recipe sets it), so only
    the ramp makes the trainer score at other temperatures. The real `CurriculumAsyncGRPOTrainer` (TRL's constructor;
    no server: the test-only CPU attention and a no-op weight transfer, tests/async_cpu.py; the tiny Llama, since
    TRL's tree attention reads its dtype from a `Linear` layer, which GPT-2's `Conv1D` attention lacks) takes a
    micro-batch of a sample at the ramp's start (1.0) and one at its end (0.5), each with the engine's log-probabilities
    at its own temperature, through TRL's packing, collator and `compute_loss`: TRL's `ratio` is 1 and its `kl` 0 only
    where each term is scored at its sample's temperature (with the 0.5 sample scored at 1.0: ratio 3.37).
    """
    from transformers import AutoModelForCausalLM
    from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout
    from trl.experimental.async_grpo.packing import TreeRow

    from grpo_curriculum import Stage

    from .async_cpu import build_async_trainer

    trainer = build_async_trainer(monkeypatch, tiny_model_dir, str(tmp_path),
                                  stages=[Stage(num_generations=2, temperature=1.0, temperature_end=0.5)])
    trainer.current_gradient_accumulation_steps = 1  # (the Trainer's training loop sets it)
    engine = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()  # the policy's weights, plain attention
    with torch.no_grad():  # logits far from uniform, so that temperatures differ clearly
        for model in (engine, trainer.model):
            model.get_output_embeddings().weight.mul_(8.0)
    generator = torch.Generator().manual_seed(3)
    row = TreeRow()
    for group, temperature in enumerate((1.0, 0.5)):
        ids = torch.randint(4, 20, (9,), generator=generator)  # a prompt of 4 tokens, a completion of 5
        with torch.no_grad():
            logits = engine(input_ids=ids.unsqueeze(0)).logits[0].double()
        old = torch.zeros(len(ids), dtype=torch.float64)  # the engine's: token p at its temperature, from p - 1
        old[4:] = torch.log_softmax(logits[3:-1] / temperature, dim=-1).gather(1, ids[4:, None])[:, 0]
        row.add({"input_ids": ids.numpy(), "completion_mask": np.array([0] * 4 + [1] * 5),
                 "old_log_probs": old.numpy(), "advantage": 1.0, "group_id": group,
                 "metrics": {SAMPLED_TEMPERATURE: temperature, "reward": 0.0}})  # fmt: skip
    batch = _with_loss_temperatures(DataCollatorForRollout(pad_token_id=0, num_processes=1), default=1.0)([[row]])
    trainer.compute_loss(trainer.model, batch)
    metrics = trainer._metrics["train"]
    assert metrics["ratio"][-1] == pytest.approx(1.0, abs=1e-4) and metrics["kl"][-1] == pytest.approx(0.0, abs=1e-6)
    assert metrics["curriculum/loss_temperatures"] == [2.0]  # one pass a temperature
