"""
`CurriculumGRPOTrainer` with `use_vllm=True`, through TRL's real `VLLMGeneration` / `VLLMClient` code, with the vLLM
engine replaced at its outermost boundary (see `tests/fake_vllm.py`): a switch of G and temperature must reach the
server requests (server mode) and the sampling parameters (colocate mode), and completions must come back in group
order; request plans must split small rounds over the server's engines without disturbing the groups.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grpo_curriculum import Stage
from grpo_curriculum._trl import install_request_plan, vllm_num_engines_from_server
from grpo_curriculum.callback import CurriculumCallback
from grpo_curriculum.tasks import build_model, build_tokenizer
from grpo_curriculum.trainer import CurriculumGRPOTrainer
from grpo_curriculum.vllm_plan import RequestPlan

from .conftest import RoundRecorder, assert_whole_groups, grpo_args, indexed_dataset
from .fake_vllm import (  # noqa: F401 - fixtures
    FakeVLLMServer,
    decode_fake_completion,
    fake_vllm_colocate,
    fake_vllm_server,
)

# The fake completion is the prompt's 2 echo words + 3 digit tokens + <eos>: keep all of it.
MAX_COMPLETION_LENGTH = 6


def make_vllm_trainer(tmp_path, stages, mode, vllm_num_engines=None, **overrides):
    recorder = RoundRecorder()
    dataset = indexed_dataset()
    vllm = dict(use_vllm=True, vllm_mode=mode, max_completion_length=MAX_COMPLETION_LENGTH)
    if mode == "server":
        vllm["vllm_server_base_url"] = FakeVLLMServer.base_url
    trainer = CurriculumGRPOTrainer(
        model=build_model(),
        processing_class=build_tokenizer(),
        reward_funcs=recorder,
        args=grpo_args(tmp_path, **{**vllm, **overrides}),
        train_dataset=dataset,
        callbacks=[CurriculumCallback(stages, vllm_num_engines=vllm_num_engines)],
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


def test_server_mode_requests_follow_the_schedule(tmp_path, fake_vllm_server):
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, THREE_STAGES, "server", max_steps=6)
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
        assert request.payload["return_token_ids"] is True and request.payload["logprobs"] == 0
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
    assert not hasattr(trainer, "_vllm_request_plan")  # no plan installed: exactly TRL's requests


def test_colocate_mode_sampling_params_follow_the_schedule(tmp_path, fake_vllm_colocate):
    stages = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=8, temperature=1.2)]
    trainer, recorder, dataset = make_vllm_trainer(tmp_path, stages, "colocate", max_steps=4)
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

    generate = getattr(trainer.vllm_generation, "generate")
    install_request_plan(trainer, 8)  # colocate mode: nothing to balance
    assert trainer.vllm_generation.generate == generate and not hasattr(trainer, "_vllm_request_plan")


def test_request_plan_splits_rounds_with_fewer_prompts_than_engines(tmp_path, fake_vllm_server):
    fake_vllm_server.data_parallel_size = 8
    stages = [Stage(num_generations=2, temperature=0.7, until_step=2), Stage(num_generations=8, temperature=1.2)]
    # Generation batch 16: 8 prompts at G=2 (already balanced over 8 engines), 2 prompts at G=8 (2 of 8 engines busy).
    trainer, recorder, dataset = make_vllm_trainer(
        tmp_path, stages, "server", vllm_num_engines="auto", max_steps=4, per_device_train_batch_size=16
    )
    assert vllm_num_engines_from_server(trainer) == 8  # "auto" asked the server, as the trainer did at construction
    trainer.train()

    requests = fake_vllm_server.generation_requests
    # G=2: TRL's layout, untouched. G=8: each prompt split into 4 sub-requests of n=2.
    assert [(r.n, r.temperature, len(r.prompts)) for r in requests] == [(2, 0.7, 8)] * 2 + [(2, 1.2, 8)] * 2
    assert all(r.engine_loads == [2] * 8 for r in requests)  # every engine samples 2 completions
    for request, call in zip(requests, recorder.calls, strict=True):
        g = call["num_generations"]
        split = g // request.n
        assert_whole_groups(call["idx"], g)
        unique = prompt_ids_of(dataset, call["idx"][::g])
        assert request.prompts == [ids for ids in unique for _ in range(split)]  # k copies in a row, in group order
        # The k sub-requests' completions concatenate into whole groups, in order.
        assert_completions_in_group_order(call, dataset, n_per_request=request.n)
    assert [c["num_generations"] for c in recorder.calls] == [2, 2, 8, 8]
    assert all(h["frac_reward_zero_std"] == 1.0 for h in train_history(trainer))
    assert trainer._vllm_request_plan == RequestPlan(num_prompts=2, num_generations=8, num_engines=8, split=4)


# --- the wrapper on its own, around TRL's real VLLMClient ------------------------------------------------------------


def client_trainer(mode="server", is_main_process=True):
    from trl.generation.vllm_client import VLLMClient

    client = VLLMClient(base_url=FakeVLLMServer.base_url) if mode == "server" and is_main_process else None
    generation = SimpleNamespace(mode=mode, **({"vllm_client": client} if client else {}))
    return SimpleNamespace(
        use_vllm=True, vllm_generation=generation, accelerator=SimpleNamespace(is_main_process=is_main_process)
    )


def test_wrapper_collapses_prompt_ids_and_keeps_group_order(fake_vllm_server):
    trainer = client_trainer()
    prompts = [[4, 8, 9, 7], [4, 10, 11, 7]]
    unsplit = trainer.vllm_generation.vllm_client.generate(prompts=prompts, n=4, max_tokens=6)
    install_request_plan(trainer, 4)
    split = trainer.vllm_generation.vllm_client.generate(prompts=prompts, n=4, max_tokens=6)
    assert trainer._vllm_request_plan.split == 2
    assert fake_vllm_server.generation_requests[-1].prompts == [prompts[0]] * 2 + [prompts[1]] * 2
    assert fake_vllm_server.generation_requests[-1].n == 2
    assert split["prompt_ids"] == unsplit["prompt_ids"] == prompts
    assert len(split["completion_ids"]) == len(split["logprobs"]) == len(split["logprob_token_ids"]) == 8
    # Same completions as TRL's layout except for the sample index within a request: the groups are intact.
    for a, b in zip(split["completion_ids"], unsplit["completion_ids"], strict=True):
        assert a[:-2] == b[:-2]


def test_wrapper_expands_features_with_their_prompts(fake_vllm_server):
    trainer = client_trainer()
    install_request_plan(trainer, 4)
    prompts, features = [[4, 8, 7]], [{"image": "a"}]
    output = trainer.vllm_generation.vllm_client.generate(prompts=prompts, features=features, n=4, max_tokens=6)
    requests = fake_vllm_server.completions
    assert [(r.endpoint, r.prompts, r.n, r.features) for r in requests] == [
        ("/inference/v1/generate", prompts, 1, features)
    ] * 4
    assert output["prompt_ids"] == prompts and len(output["completion_ids"]) == 4


def test_wrapper_keeps_trl_layout_with_a_fixed_seed(fake_vllm_server):
    trainer = client_trainer()
    install_request_plan(trainer, 8)
    trainer.vllm_generation.vllm_client.generate(prompts=[[4, 8, 7]], n=8, generation_kwargs={"seed": 3})
    assert fake_vllm_server.generation_requests[-1].n == 8  # identical sub-requests would draw identical samples
    assert trainer._vllm_request_plan.split == 1


def test_wrapper_reinstall_and_no_ops(fake_vllm_server):
    trainer = client_trainer()
    client = trainer.vllm_generation.vllm_client
    original = client.generate
    install_request_plan(trainer, None)
    assert client.generate == original  # unknown engine count: TRL's layout
    install_request_plan(trainer, 2)
    install_request_plan(trainer, 4)  # replaces, does not stack
    assert client.generate._grpo_curriculum_original == original
    client.generate(prompts=[[4, 8, 7]], n=4)
    assert fake_vllm_server.generation_requests[-1].n == 1 and trainer._vllm_request_plan.num_engines == 4

    other = client_trainer(is_main_process=False)
    install_request_plan(other, 4)
    assert vllm_num_engines_from_server(other) is None and not hasattr(other.vllm_generation, "vllm_client")


@pytest.mark.parametrize("expose", [True, False])
def test_num_engines_from_server(fake_vllm_server, expose):
    fake_vllm_server.data_parallel_size = 4
    trainer = client_trainer()
    fake_vllm_server.expose_dev_endpoints = expose
    assert vllm_num_engines_from_server(trainer) == (4 if expose else None)
    assert vllm_num_engines_from_server(client_trainer(mode="colocate")) is None
