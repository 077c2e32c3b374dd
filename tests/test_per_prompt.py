"""
Per-prompt G in real TRL training loops: rounds of mixed group sizes are laid out, scored and trained per real group.

Where a test needs known group sizes it fixes the G each prompt wants by its dataset index (the allocation rule itself
is tested with tables in `tests/test_allocation.py`); the trainer must realise whatever the allocator decides.
"""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from grpo_curriculum import Adaptive, CurriculumError, Stage
from grpo_curriculum.demo.tasks import build_model, build_tokenizer
from grpo_curriculum.training.advantages import grpo_advantages

from .conftest import RoundRecorder, group_runs, grpo_args, indexed_dataset, per_prompt_stages
from .test_trainer import make_trainer, plain_and_curriculum, train_history

per_prompt = per_prompt_stages


def record_rounds(trainer):
    """Spy on each training round: its group sizes and the advantages TRL trains on (this process, row order)."""
    rounds, original = [], trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        rounds.append({"sizes": list(trainer._round.sizes), "advantages": output["advantages"].tolist()})
        return output

    trainer._generate_and_score_completions = spy
    return rounds


def first_row_of_each_group(prompts, completions, idx, **kwargs):
    """Reward 1 for the first row of each group, 0 for the others; prompts with index % 4 == 3 always get 1."""
    return [1.0 if i % 4 == 3 or j == 0 or idx[j - 1] != i else 0.0 for j, i in enumerate(idx)]


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_mixed_groups_are_contiguous_and_get_per_group_advantages(tmp_path, wanted_by_index, scale_rewards):
    wanted_by_index(lambda index: (2, 4, 8)[index % 3])
    recorder = RoundRecorder(reward_fn=first_row_of_each_group)
    trainer, recorder = make_trainer(tmp_path, per_prompt(defer=False), recorder=recorder, max_steps=4,
                                     per_device_train_batch_size=16, shuffle_dataset=False,
                                     scale_rewards=scale_rewards)  # fmt: skip
    rounds = record_rounds(trainer)
    trainer.train()
    assert [r["sizes"] for r in rounds] == [[2, 4, 8, 2], [4, 8, 2, 2], [8, 2, 4, 2], [2, 4, 8, 2]]
    for call, round_ in zip(recorder.calls, rounds, strict=True):
        sizes = round_["sizes"]
        assert group_runs(call["idx"]) == sizes  # each prompt's rows are contiguous, one group per prompt
        wanted = [(2, 4, 8)[call["idx"][sum(sizes[:i])] % 3] for i in range(len(sizes))]
        assert sizes[:-1] == wanted[:-1] and sizes[-1] <= wanted[-1]  # the last prompt gets what the budget leaves
        rewards = first_row_of_each_group(None, None, call["idx"])
        expected = []
        all_std = torch.tensor(rewards).std().item()  # "batch": one std over the round (Bessel-corrected, as TRL)
        start = 0
        for g in sizes:
            group = rewards[start : start + g]
            mean = sum(group) / g
            std = math.sqrt(sum((r - mean) ** 2 for r in group) / (g - 1))  # (G-1)/G... -> 1/sqrt(G) for 1, 0, ...
            scale = {"group": std + 1e-4, "batch": all_std + 1e-4, "none": 1.0}[scale_rewards]
            expected += [(r - mean) / scale for r in group]
            start += g
        assert round_["advantages"] == pytest.approx(expected, abs=1e-5)
    history = train_history(trainer)
    # TRL's metric as TRL computes it for the real groups: the share of rows whose reward std is 0, the group's std
    # ("group", "none") or the round's ("batch": never 0 here); the curriculum's own share under its own name.
    for h, call in zip(history, recorder.calls, strict=True):
        zero = sum(1 for i in call["idx"] if i % 4 == 3) / len(call["idx"])
        assert h["frac_reward_zero_std"] == pytest.approx(0.0 if scale_rewards == "batch" else zero)
        assert h["curriculum/zero_std_fraction"] == pytest.approx(zero)
        assert h["curriculum/num_generations"] == pytest.approx(4.0) and h["curriculum/prompts"] == 4
        assert h["curriculum/deferred"] == 0


def test_closed_form_advantages_of_one_hot_groups(tmp_path, wanted_by_index):
    """A group of G rewards (1, 0, ..., 0) has advantages (G - 1) / sqrt(G) and -1 / sqrt(G): check it per G."""
    wanted_by_index(lambda index: (2, 4, 8)[index % 3])
    recorder = RoundRecorder(reward_fn=lambda prompts, completions, idx, **kw: [
        1.0 if j == 0 or idx[j - 1] != i else 0.0 for j, i in enumerate(idx)])  # fmt: skip
    trainer, _ = make_trainer(tmp_path, per_prompt(defer=False), recorder=recorder, max_steps=2,
                              per_device_train_batch_size=16, shuffle_dataset=False)  # fmt: skip
    rounds = record_rounds(trainer)
    trainer.train()
    for round_ in rounds:
        start = 0
        for g in round_["sizes"]:
            first, *rest = round_["advantages"][start : start + g]
            assert first == pytest.approx((g - 1) / math.sqrt(g), rel=1e-3)
            assert rest == pytest.approx([-1 / math.sqrt(g)] * (g - 1), rel=1e-3)
            start += g


SCORES = [0.3, None, 1.0, 0.0, 0.5, 0.5, None, 0.9]


def scored(offset):
    def reward(prompts, completions, idx, **kwargs):
        return [SCORES[(i * 3 + j + offset) % len(SCORES)] for j, i in enumerate(idx)]

    reward.__name__ = f"scored{offset}"
    return reward


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_group_advantages_equal_trl_on_equal_groups(tmp_path, aggregation, scale_rewards):
    """Our per-group arithmetic, given TRL's round with equal groups, gives TRL's advantages (NaN rewards included)."""
    args = grpo_args(tmp_path, num_generations=4, scale_rewards=scale_rewards, multi_objective_aggregation=aggregation,
                     reward_weights=[1.0, 0.5])  # fmt: skip
    trainer = GRPOTrainer(model=build_model(), processing_class=build_tokenizer(), reward_funcs=[scored(0), scored(5)],
                          args=args, train_dataset=indexed_dataset())  # fmt: skip
    captured, original = {}, trainer._calculate_rewards

    def spy(*args):
        captured["rewards_per_func"] = original(*args)
        return captured["rewards_per_func"]

    trainer._calculate_rewards = spy
    trainer.model.train()
    batch = next(iter(trainer.get_train_dataloader()))
    output = trainer._generate_and_score_completions(batch)
    ours = grpo_advantages(captured["rewards_per_func"], [4] * 2, trainer.reward_weights, trainer.scale_rewards,
                           trainer.multi_objective_aggregation)[0]
    assert torch.isnan(captured["rewards_per_func"]).any()
    torch.testing.assert_close(ours, output["advantages"], atol=1e-5, rtol=1e-5)


def test_one_candidate_without_deferral_trains_like_plain_grpo(tmp_path):
    """`per_prompt` with one candidate G and `defer: false` is plain GRPO at that G: same prompts, rewards, losses."""
    overrides = dict(gradient_accumulation_steps=2, num_generations=4, temperature=0.9, max_steps=8, seed=3)
    dataset = indexed_dataset(num_prompts=20).map(lambda row: {"target": row["prompt"].split(" : ")[1][:-2]})
    per_prompt = [Stage(temperature=0.9, adaptive=Adaptive((4,), policy="per_prompt", defer=False))]
    plain, ours = plain_and_curriculum(tmp_path, per_prompt, dataset, **overrides)
    assert ours == plain


def always_defer_settled(monkeypatch):
    """With `defer` on, defer every prompt whose last group had zero std (GRESO's draw made certain)."""
    from grpo_curriculum.core.allocation import PerPromptAllocator

    monkeypatch.setattr(PerPromptAllocator, "deferred",
                        lambda self, slot, epoch: self.defer and self.stats.zero_streak[slot] != 0)


def test_deferral_skips_settled_prompts_for_a_pass_and_logs_it(tmp_path, monkeypatch):
    """Prompts whose groups had zero std are deferred on the next pass and counted in the logs, with the skip
    probabilities."""
    always_defer_settled(monkeypatch)
    recorder = RoundRecorder(reward_fn=lambda prompts, completions, idx, **kw: [
        float(i % 2) if i < 6 else float(j % 2) for j, i in enumerate(idx)])  # fmt: skip
    # 12 prompts, G 2, 4 prompts a round: pass 1 is rounds 0-2. Prompts 0-5 have constant rewards (zero std).
    trainer, recorder = make_trainer(tmp_path, per_prompt(candidates=(2,), defer=True), recorder=recorder,
                                     dataset=indexed_dataset(12), max_steps=6, shuffle_dataset=False)  # fmt: skip
    trainer.train()
    seen = [sorted(set(c["idx"])) for c in recorder.calls]
    assert seen[:3] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    # Every later pass: 0-5 deferred, 6-9 trained, and 10-11, too few for a round, dropped as TRL drops a
    # pass's tail (with shuffling, the default, the tail is different prompts every pass).
    assert seen[3:] == [[6, 7, 8, 9]] * 3
    history = train_history(trainer)
    assert [h["curriculum/deferred"] for h in history] == [0, 0, 0, 6, 6, 6]
    assert history[-1]["curriculum/deferred_total"] == 18 == trainer._curriculum.deferred_total
    # Rounds 1 and 2 hold all-success groups (1, 3 / 5) and all-failure ones (0, 2 / 4) above half the target share
    # 0.25: both skip probabilities rise; the rounds of mixed prompts then lower them.
    easy = [h["curriculum/policy/skip_p_easy"] for h in history]
    assert easy == pytest.approx([0.51, 0.52, 0.51, 0.50, 0.49, 0.48])
    assert [h["curriculum/policy/skip_p_hard"] for h in history] == pytest.approx(easy)


def test_bad_per_prompt_settings_fail_before_any_step(tmp_path):
    with pytest.raises(CurriculumError) as error:
        make_trainer(tmp_path, per_prompt(candidates=(4, 5)), per_device_train_batch_size=6, num_generations=2)
    assert "stages[0].adaptive.num_generations" in str(error.value) and "cannot fill the generation batch" in str(
        error.value)  # fmt: skip
    with pytest.raises(CurriculumError, match="larger than the generation batch"):
        make_trainer(tmp_path, per_prompt(candidates=(2, 16)), per_device_train_batch_size=8)
    for knobs, match in [(dict(defer="yes"), "defer"), (dict(decay=1.0), "decay"), (dict(weight="entropy"), "weight"),
                         (dict(lookahead=-1), "lookahead"), (dict(skip_target=1.0), "skip_target"),
                         (dict(mean_generations=0), "mean_generations"),
                         (dict(window=3), "only applies with `policy: success_rate`")]:  # fmt: skip
        with pytest.raises(CurriculumError, match=match):
            Adaptive((2, 4), policy="per_prompt", **knobs)
    with pytest.raises(CurriculumError, match="only applies with `policy: per_prompt`"):
        Adaptive((2, 4), policy="success_rate", defer=False)  # `defer` set away from its default (true)
    with pytest.raises(CurriculumError, match="only applies with `policy: per_prompt`"):
        Adaptive((2, 4), policy="hysteresis", weight="variance")


def test_candidates_need_not_divide_the_batch(tmp_path, wanted_by_index):
    wanted_by_index(lambda index: 3)
    trainer, recorder = make_trainer(tmp_path, per_prompt(candidates=(3, 4)), per_device_train_batch_size=16,
                                     num_generations=4, max_steps=3)  # fmt: skip
    rounds = record_rounds(trainer)
    trainer.train()
    assert [r["sizes"] for r in rounds] == [[3, 3, 3, 3, 4]] * 3  # 16 = 3 x 4 + 4: the last prompt takes 4
    for call in recorder.calls:
        assert group_runs(call["idx"]) == [3, 3, 3, 3, 4]


def test_variable_group_metrics_for_a_fake_trainer():
    """`grpo_advantages` on hand-made rewards: NaN rows get 0, so do the rows of a single-valued group."""
    rewards = torch.tensor([[1.0], [0.0], [float("nan")], [2.0], [2.0], [2.0], [5.0], [1.0]])
    advantages = grpo_advantages(rewards, [3, 3, 2], torch.tensor([1.0]), "group", "sum_then_normalize")[0]
    assert advantages[2] == 0 and advantages[3:6].tolist() == [0.0] * 3
    assert advantages[6].item() == pytest.approx(2 / (math.sqrt(8) + 1e-4))


def test_iterable_dataset(tmp_path, monkeypatch):
    """Per-prompt rounds over a streamed dataset: statistics keyed by hash bucket, lookahead without consuming."""
    recorder = RoundRecorder(reward_fn=lambda prompts, completions, idx, **kw: [
        float(i % 2) if i < 8 else float(j % 2) for j, i in enumerate(idx)])  # fmt: skip
    always_defer_settled(monkeypatch)
    trainer, recorder = make_trainer(tmp_path, per_prompt((2, 4), defer=True, lookahead=2), recorder=recorder,
                                     dataset=indexed_dataset(16).to_iterable_dataset(), max_steps=11,
                                     shuffle_dataset=False, num_generations=4)  # fmt: skip
    trainer.train()
    taken = []
    for call in recorder.calls:
        assert sum(call["sizes"]) == 8 and group_runs(call["idx"]) == call["sizes"]
        taken.append([call["idx"][sum(call["sizes"][:i])] for i in range(len(call["sizes"]))])
    # The first pass in stream order, none skipped or repeated; prompt 15 alone cannot fill a round: dropped with the
    # pass's tail, as TRL drops it.
    assert [i for prompts in taken[:5] for i in prompts] == list(range(15))
    assert trainer._curriculum.deferred_total > 0  # prompts 0-7 (constant rewards) deferred on the next pass
    assert all(i >= 8 for prompts in taken[-2:] for i in prompts)


def settled_or_mixed(prompts, completions, idx, **kwargs):
    """Prompts with index % 3 == 0 always score 1 (solved), == 1 always 0 (hopeless), the others alternate (mixed)."""
    return [1.0 if i % 3 == 0 else 0.0 if i % 3 == 1 else float(j % 2) for j, i in enumerate(idx)]


ITERABLE_GEOMETRY = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4,
                         max_steps=22, save_strategy="steps", save_steps=1, shuffle_dataset=True)  # fmt: skip


def make_iterable_run(output_dir):
    return make_trainer(output_dir, per_prompt((2, 4, 8), defer=True, lookahead=2),
                        recorder=RoundRecorder(settled_or_mixed), dataset=indexed_dataset(12).to_iterable_dataset(),
                        **ITERABLE_GEOMETRY)  # fmt: skip


@pytest.fixture(scope="module")
def iterable_full_run(tmp_path_factory):
    """The streamed per-prompt run that never stopped (a checkpoint every step), shared by the resumes from it."""
    output_dir = tmp_path_factory.mktemp("iterable-full")
    full, full_recorder = make_iterable_run(output_dir)
    full.train()
    return output_dir, full, [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in full_recorder.calls]


@pytest.mark.parametrize("resume_step", [9, 17])
def test_mid_round_resume_on_an_iterable_dataset_replays_the_rounds(tmp_path, iterable_full_run, resume_step):
    """
    A checkpoint taken inside a per-prompt round of a streamed dataset: the resumed run regenerates that round (same
    prompts and G) and then trains the rounds of the run that never stopped.
    """
    full_dir, full, expected = iterable_full_run
    assert resume_step % 2 == 1 and full._curriculum.deferred_total > 0  # inside a round (2 steps a round); deferrals

    resumed, recorder = make_iterable_run(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(full_dir / f"checkpoint-{resume_step}"))
    got = [(c["step"], tuple(c["sizes"]), tuple(c["idx"])) for c in recorder.calls]
    first = max(i for i, r in enumerate(expected) if r[0] <= resume_step)
    assert got[0][1:] == expected[first][1:]
    assert got[1:] == expected[first + 1 :]
    assert resumed._curriculum.deferred_total == full._curriculum.deferred_total


@pytest.mark.parametrize("size, iterable", [(1_000_000, False), (200_000, True)], ids=["map-1M", "iterable-200k"])
def test_all_settled_rounds_progress_in_bounded_time_and_memory(size, iterable, monkeypatch):
    """
    Every prompt settled and drawn for deferral, no shuffling: each round still moves on through the pass
    (no prompt trained twice in a pass while others wait), counts its deferrals, costs O(round) time and holds O(round)
    rows of a streamed dataset in memory, however large the pass.
    """
    import time
    import tracemalloc

    from datasets import Dataset

    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.training import stream as _stream

    dataset = Dataset.from_dict({"prompt": [f"p{i}" for i in range(size)], "idx": list(range(size))})
    stream = _stream.PromptStream(dataset.to_iterable_dataset() if iterable else dataset, shuffle=False, seed=0)
    policy = make_policy(Adaptive((2, 4, 8, 16), policy="per_prompt", defer=True, lookahead=2), 2, 1.0)
    policy.bind(budget=16, slots=_stream.prompt_slots(stream), seed=0)
    policy.allocator.stats.zero_streak[:] = 1
    monkeypatch.setattr(type(policy.allocator), "deferred", lambda self, slot, epoch: True)
    build = lambda: _per_prompt_round(policy, stream)  # noqa: E731
    build()  # opens the pass (a map-style pass's order is made once a pass)
    seen, deferred, times = [], 0, []
    for measure_memory in (False, False, False, True):
        if measure_memory:
            tracemalloc.start()
        start = time.process_time()  # CPU time: a busy machine stretches the wall clock, not this
        _, _, prompts, sizes, skipped = build()
        times.append(time.process_time() - start)
        assert sum(sizes) == 16 and max(times) < 0.05, times
        seen += [row["idx"] for row in prompts] if iterable else list(prompts)
        deferred += skipped
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(seen) == len(set(seen)) and deferred > 0
    assert peak < 2**20, peak  # bytes


def _per_prompt_round(policy, stream):
    """A per-prompt round of `policy` from `stream` as the trainer allocates it: `(start, plan, prompts, sizes,
    deferred)`."""
    from grpo_curriculum.training.driver import CurriculumDriver

    start, plan, prompts = CurriculumDriver.per_prompt_round(SimpleNamespace(policy=policy, skipped=Counter()), stream,
                                                             "round")
    return start, plan, prompts, list(plan["sizes"]), plan["deferred"]


@pytest.mark.parametrize("skip", ["greso", "evidence"])
def test_a_small_all_settled_dataset_is_still_trained_in_turn(skip):
    """
    Every prompt settled and mostly deferred (skip probability 0.95) in a pass shorter than a round's deferral cap:
    when deferral would leave a round short, it is filled without deferral from the rest of the pass, so every prompt
    takes its turn (not the first prompts of a new pass every round).
    """
    from collections import Counter

    from datasets import Dataset

    from grpo_curriculum.core.policies import make_policy
    from grpo_curriculum.training import stream as _stream

    stream = _stream.PromptStream(Dataset.from_dict({"prompt": [f"p{i}" for i in range(12)]}), shuffle=False, seed=0)
    policy = make_policy(Adaptive((2, 4, 8, 16), policy="per_prompt", defer=True, lookahead=2, skip=skip), 2, 1.0)
    policy.bind(budget=16, slots=_stream.prompt_slots(stream), seed=0)
    policy.allocator.stats.zero_streak[:] = 1
    policy.allocator.explore = {"easy": 0.05, "hard": 0.05}
    trained = Counter()
    for _ in range(40):
        _, _, prompts, sizes, _ = _per_prompt_round(policy, stream)
        assert sum(sizes) == 16 and len(set(prompts)) == len(prompts)
        trained.update(prompts)
    assert sorted(trained) == list(range(12)) and max(trained.values()) <= 2 * min(trained.values()), trained


@pytest.mark.parametrize("iterable", [False, True], ids=["map", "iterable"])
def test_take_serves_the_prompts_a_per_prompt_round_left_waiting_once(iterable):
    """
    A per-prompt round leaves prompts waiting, then the stage switches to one of fixed G (or top-up, or dynamic
    sampling: they all `take`): the waiting prompts come first, once, and every prompt of the pass is served once.
    """
    from datasets import Dataset

    from grpo_curriculum.training import stream as _stream

    dataset = Dataset.from_dict({"prompt": [f"p{i}" for i in range(12)], "idx": list(range(12))})
    stream = _stream.PromptStream(dataset.to_iterable_dataset() if iterable else dataset, shuffle=False, seed=0)
    index = (lambda rows: [row["idx"] for row in rows]) if iterable else list
    stream.open_pass()
    assert index(stream.commit({"read": 4, "taken": [0, 3], "left": [1, 2]})) == [0, 3]
    assert index(stream.waiting) == [1, 2]
    served = [index(stream.take(4)), index(stream.take(4))]
    assert served == [[1, 2, 4, 5], [6, 7, 8, 9]] and stream.waiting == []
    assert index(stream.take(2)) == [10, 11]  # the rest of the pass, then a new one
    assert index(stream.take(2)) == [0, 1] and stream.epoch == 2
