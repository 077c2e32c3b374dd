"""
`CurriculumGRPOTrainer` with `use_vllm=True`, through TRL's real `VLLMGeneration` / `VLLMClient` code, with the vLLM
engine replaced at its outermost boundary (see `tests/fake_vllm.py`): a switch of G and temperature must reach the
server requests (server mode) and the sampling parameters (colocate mode), and completions must come back in group
order.
"""

from __future__ import annotations

from grpo_curriculum import Stage
from grpo_curriculum.training.callback import CurriculumCallback
from grpo_curriculum.demo.tasks import build_model, build_tokenizer
from grpo_curriculum.training.trainer import CurriculumGRPOTrainer, CurriculumRLOOTrainer
from trl import RLOOConfig

import pytest

from .conftest import RoundRecorder, assert_whole_groups, group_runs, grpo_args, indexed_dataset, per_prompt_stages
from .fake_vllm import (  # noqa: F401 - fixtures
    FakeVLLMServer,
    decode_fake_completion,
    fake_vllm_colocate,
    fake_vllm_server,
)

# The fake completion is the prompt's 2 echo words + 3 digit tokens + <eos>: keep all of it.
MAX_COMPLETION_LENGTH = 6


# Both trainers sample through TRL's `VLLMGeneration`; RLOO with `beta = 0`, so that its rewards (the prompt's index)
# carry no KL penalty and groups of one prompt have zero std, as GRPO's.
TRAINERS = pytest.mark.parametrize("cls", [CurriculumGRPOTrainer, CurriculumRLOOTrainer], ids=["grpo", "rloo"])


def make_vllm_trainer(tmp_path, stages, mode, cls=CurriculumGRPOTrainer, recorder=None, dataset=None, **overrides):
    recorder = recorder or RoundRecorder()
    dataset = dataset or indexed_dataset()
    vllm = dict(use_vllm=True, vllm_mode=mode, max_completion_length=MAX_COMPLETION_LENGTH)
    if mode == "server":
        vllm["vllm_server_base_url"] = FakeVLLMServer.base_url
    rloo = cls is CurriculumRLOOTrainer
    if rloo:
        vllm["beta"] = 0.0
    trainer = cls(
        model=build_model(),
        processing_class=build_tokenizer(),
        reward_funcs=recorder,
        args=grpo_args(tmp_path, RLOOConfig if rloo else None, **{**vllm, **overrides}),
        train_dataset=dataset,
        callbacks=[CurriculumCallback(stages)],
    )
    recorder.trainer = trainer
    return trainer, recorder, dataset


def prompt_ids_of(dataset, indices):
    tokenizer = build_tokenizer()
    return [tokenizer(text=dataset[i]["prompt"])["input_ids"] for i in indices]


def assert_completions_in_group_order(call, dataset, n_per_request):
    """
    Row `r` of the round (as the reward function sees it) holds the completion the engine returned at position `r`,
    sampled from row `r`'s own prompt; `n_per_request` is the `n` each request asked for.
    """
    for row, (i, text) in enumerate(zip(call["idx"], call["completions"], strict=True)):
        completion = decode_fake_completion(text)
        assert completion.words == tuple(dataset[i]["target"].split()), (row, i, text)
        assert completion.position == row, (row, text, call["idx"])
        assert completion.sample == row % n_per_request, (row, text)


def train_history(trainer):
    return [h for h in trainer.state.log_history if "loss" in h]


THREE_STAGES = [
    Stage(num_generations=2, temperature=0.7, until_step=2),
    Stage(num_generations=4, temperature=1.0, until_step=4),
    Stage(num_generations=8, temperature=1.2),
]


@TRAINERS
def test_server_mode_requests_follow_the_schedule(tmp_path, fake_vllm_server, cls):
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, THREE_STAGES, "server", cls=cls, max_steps=6)
    trainer.train()

    expected = [(2, 0.7)] * 2 + [(4, 1.0)] * 2 + [(8, 1.2)] * 2
    requests = fake_vllm_server.generation_requests
    assert [(r.n, r.temperature) for r in requests] == expected
    assert [(c["num_generations"], c["temperature"]) for c in recorder.calls] == expected
    for request, call, (g, _) in zip(requests, recorder.calls, expected, strict=True):
        assert len(call["idx"]) == 8  # the generation batch is fixed
        assert_whole_groups(call["idx"], g)
        # Deduplicated with the new stride: each unique prompt once, in group order.
        assert request.prompts == prompt_ids_of(dataset, call["idx"][::g])
        assert request.max_tokens == MAX_COMPLETION_LENGTH
        assert request.payload["return_token_ids"] is True
        assert request.payload["logprobs"] == (None if cls is CurriculumRLOOTrainer else 0)  # RLOO asks for none
        assert_completions_in_group_order(call, dataset, n_per_request=g)
    # Rewards are the prompt index: TRL grouped rewards by the same G as the completions.
    assert all(h["frac_reward_zero_std"] == 1.0 for h in train_history(trainer))
    assert [h["curriculum/num_generations"] for h in train_history(trainer)] == [2, 2, 4, 4, 8, 8]

    # The weights reach the server before every round at a new step, and the prefix cache is reset each time.
    names = [name for name, _ in trainer.model.named_parameters()]
    assert len(fake_vllm_server.weight_updates) == 6 == fake_vllm_server.prefix_cache_resets
    for update in fake_vllm_server.weight_updates:
        assert update.finished and update.announced == names == [name for name, _ in update.received]
    assert fake_vllm_server.communicator_inits[0]["world_size"] == 2


@TRAINERS
def test_colocate_mode_sampling_params_follow_the_schedule(tmp_path, fake_vllm_colocate, cls):
    stages = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=8, temperature=1.2)]
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, stages, "colocate", cls=cls, max_steps=4)
    trainer.train()

    expected = [(2, 0.7)] * 2 + [(8, 1.2)] * 2
    calls = fake_vllm_colocate.generate_calls
    assert [(c.sampling_params.n, c.sampling_params.temperature) for c in calls] == [(1, t) for _, t in expected]
    assert all(c.sampling_params.max_tokens == MAX_COMPLETION_LENGTH for c in calls)
    for generate_call, call, (g, temperature) in zip(calls, recorder.calls, expected, strict=True):
        assert (call["num_generations"], call["temperature"]) == (g, temperature)
        assert_whole_groups(call["idx"], g)
        # Colocated vLLM gets every row (each prompt G times, in group order) and samples one completion per row.
        assert generate_call.prompts == prompt_ids_of(dataset, call["idx"])
        assert_completions_in_group_order(call, dataset, n_per_request=1)
    assert all(h["frac_reward_zero_std"] == 1.0 for h in train_history(trainer))

    (llm,) = fake_vllm_colocate.llms
    assert llm.init_kwargs["distributed_executor_backend"] == "external_launcher"
    assert llm.init_kwargs["logprobs_mode"] == "processed_logprobs"
    names = [name for name, _ in trainer.model.named_parameters()]
    assert [name for name, _ in fake_vllm_colocate.loaded_weights] == names * 4  # one sync a step
    assert fake_vllm_colocate.prefix_cache_resets == 4


# --- per-prompt rounds: groups of different sizes ---------------------------------------------------------------


def mixed_round_trainer(tmp_path, mode, wanted_by_index, cls=CurriculumGRPOTrainer, **overrides):
    wanted_by_index(lambda index: (2, 4)[index % 2])
    trainer, recorder, dataset = make_vllm_trainer(
        tmp_path, per_prompt_stages((2, 4), defer=False), mode, cls=cls, max_steps=3, per_device_train_batch_size=12,
        num_generations=4, shuffle_dataset=False, **overrides,
    )  # fmt: skip
    sizes = []
    original = trainer._curriculum_round_start

    def spy():
        round_ = original()
        sizes.append(list(round_.sizes))
        return round_

    trainer._curriculum_round_start = spy
    return trainer, recorder, dataset, sizes


@pytest.mark.parametrize(("cls", "seed"), [(CurriculumGRPOTrainer, None), (CurriculumGRPOTrainer, 7),
                                           (CurriculumRLOOTrainer, None)], ids=["grpo", "grpo-seed", "rloo"])
def test_server_mode_sends_each_group_size_as_one_request(tmp_path, fake_vllm_server, wanted_by_index, cls, seed):
    """A round of G 2 and G 4 groups: one request per size with n = that size, completions back in group order."""
    extra = {"generation_kwargs": {"seed": seed}} if seed is not None else {}
    trainer, recorder, dataset, sizes = mixed_round_trainer(tmp_path, "server", wanted_by_index, cls=cls, **extra)
    trainer.train()
    assert sizes == [[2, 4, 2, 4]] * 3  # prompts 0-3, 4-7, 8-11 in order: even indices want 2, odd ones 4
    requests = iter(fake_vllm_server.generation_requests)
    for call, round_sizes in zip(recorder.calls, sizes, strict=True):
        assert group_runs(call["idx"]) == round_sizes
        starts = [sum(round_sizes[:i]) for i in range(len(round_sizes))]
        groups = [call["idx"][s] for s in starts]
        for size in (2, 4):  # one request per distinct size, in ascending order
            request = next(requests)
            same = [prompt for prompt, g in zip(groups, round_sizes, strict=True) if g == size]
            assert (request.n, request.temperature) == (size, 1.0)
            assert request.prompts == prompt_ids_of(dataset, same)
            if seed is not None:
                assert request.payload["seed"] == seed  # vLLM gives each of the n completions seed + index
        # Row r of the round holds a completion of its own prompt: sample j of its group, from its size's request.
        for group, (start, size) in enumerate(zip(starts, round_sizes, strict=True)):
            rank = sum(1 for g in round_sizes[:group] if g == size)
            for j in range(size):
                completion = decode_fake_completion(call["completions"][start + j])
                assert completion.words == tuple(dataset[call["idx"][start]]["target"].split())
                assert (completion.sample, completion.position) == (j, rank * size + j)
    assert next(requests, None) is None
    assert [h["curriculum/num_generations"] for h in train_history(trainer)] == [3] * 3


@TRAINERS
def test_colocate_mode_samples_every_row_of_a_mixed_round(tmp_path, fake_vllm_colocate, wanted_by_index, cls):
    trainer, recorder, dataset, sizes = mixed_round_trainer(tmp_path, "colocate", wanted_by_index, cls=cls)
    trainer.train()
    calls = fake_vllm_colocate.generate_calls
    assert [c.sampling_params.n for c in calls] == [1, 1, 1]
    for generate_call, call, round_sizes in zip(calls, recorder.calls, sizes, strict=True):
        assert group_runs(call["idx"]) == round_sizes == [2, 4, 2, 4]
        assert generate_call.prompts == prompt_ids_of(dataset, call["idx"])  # every row, each group contiguous
        assert_completions_in_group_order(call, dataset, n_per_request=1)


@TRAINERS
def test_a_skipping_stage_requests_its_one_g_for_the_prompts_it_keeps(tmp_path, fake_vllm_server, monkeypatch, cls):
    """A stage of G 2 that skips, in server mode: one request a round at n 2 for the round's prompts; on the second
    pass (every prompt settled: rewards are the prompt's index) the round skips prompts before it takes its own."""
    from .test_per_prompt import always_defer_settled

    always_defer_settled(monkeypatch)
    stages = [Stage(num_generations=2, temperature=0.9, skip=True)]
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, stages, "server", cls=cls, max_steps=14,
                                                   shuffle_dataset=False)  # fmt: skip
    trainer.train()
    requests = fake_vllm_server.generation_requests
    assert [(r.n, r.temperature) for r in requests] == [(2, 0.9)] * 14
    for request, call in zip(requests, recorder.calls, strict=True):
        assert_whole_groups(call["idx"], 2)
        assert request.prompts == prompt_ids_of(dataset, call["idx"][::2])
    assert min(recorder.calls[12]["idx"]) > 4  # pass 2's first round: the prompts before it skipped
    assert sum(h.get("curriculum/skipped/solved", 0) + h.get("curriculum/skipped/failed", 0)
               for h in train_history(trainer)) > 0  # fmt: skip


@TRAINERS
def test_a_pilot_stage_requests_each_group_size_it_plans(tmp_path, fake_vllm_server, monkeypatch, cls):
    """G 4 with pilot groups of 2, in server mode: the first pass requests n 2 for every prompt; then the settled
    prompts are skipped and the mixed ones (index % 3 == 2) are requested at n 4; each request carries the prompts
    of its size in the round's order."""
    from .test_per_prompt import always_defer_settled, settled_or_mixed

    always_defer_settled(monkeypatch)
    stages = [Stage(num_generations=4, temperature=0.9, skip={"rule": "pooled", "pilot": 2})]
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, stages, "server", cls=cls, max_steps=6,
                                                   shuffle_dataset=False, recorder=RoundRecorder(settled_or_mixed),
                                                   dataset=indexed_dataset(12))  # fmt: skip
    trainer.train()
    requests = iter(fake_vllm_server.generation_requests)
    sizes_seen = []
    for call in recorder.calls:
        sizes = group_runs(call["idx"])
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        for size in sorted(set(sizes)):
            request = next(requests)
            assert (request.n, request.temperature) == (size, 0.9)
            same = [call["idx"][start] for start, g in zip(starts, sizes, strict=True) if g == size]
            assert request.prompts == prompt_ids_of(dataset, same)
        sizes_seen.append(sorted(set(sizes)))
    assert next(requests, None) is None
    assert sizes_seen == [[2]] * 3 + [[4]] * 3  # pass 1: pilots; then the mixed prompts at G 4
