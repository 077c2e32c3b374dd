"""Two real processes (`torchrun --nproc_per_node 2`, gloo on CPU): every process switches at the same round."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import assert_whole_groups, group_runs

ROOT = Path(__file__).resolve().parent.parent


def test_two_processes_switch_together(torchrun_scenarios):
    ranks = torchrun_scenarios("stages")

    expected_g = [2, 2, 8, 8, 4, 4]
    for rank in ranks:
        assert [c["num_generations"] for c in rank["calls"]] == expected_g
        assert [c["step"] for c in rank["calls"]] == list(range(6))
        assert [h["curriculum/num_generations"] for h in rank["history"]] == expected_g
    # Same setting, same round, on both processes; the same switches logged.
    for a, b in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert (a["step"], a["num_generations"], a["temperature"]) == (b["step"], b["num_generations"], b["temperature"])
    assert ranks[0]["switches"] == ranks[1]["switches"] and len(ranks[0]["switches"]) == 2
    # The global round (rank 0's rows then rank 1's) is made of whole groups, including groups spanning both ranks.
    seen = []
    for a, b, g in zip(ranks[0]["calls"], ranks[1]["calls"], expected_g, strict=True):
        global_round = a["idx"] + b["idx"]
        assert len(a["idx"]) == len(b["idx"]) == 4
        assert_whole_groups(global_round, g)
        seen += global_round[::g]
    assert len(seen) == len(set(seen))  # no prompt reused within the pass
    if_spanning = ranks[0]["calls"][2]["idx"] + ranks[1]["calls"][2]["idx"]
    assert len(set(if_spanning)) == 1  # G = 8 = the whole generation batch: one prompt across both processes


def test_adaptive_decisions_agree_when_ranks_see_different_rewards(torchrun_scenarios):
    """Each rank scores its rows differently; decisions come from the gathered rewards, so both ranks agree."""
    ranks = torchrun_scenarios("adaptive")
    settings = [[(c["step"], c["num_generations"], c["temperature"]) for c in rank["calls"]] for rank in ranks]
    assert settings[0] == settings[1]
    assert ranks[0]["switches"] == ranks[1]["switches"] and ranks[0]["switches"], "the policy never switched"
    for a, b in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert_whole_groups(a["idx"] + b["idx"], a["num_generations"])


def test_per_prompt_allocation_agrees_when_ranks_see_different_rewards(torchrun_scenarios):
    """Per-prompt rounds from gathered rewards: both ranks build the same prompts and G, groups span the ranks."""
    ranks = torchrun_scenarios("per_prompt")
    rounds = [[(c["step"], c["sizes"]) for c in rank["calls"]] for rank in ranks]
    assert rounds[0] == rounds[1] and ranks[0]["deferred_total"] == ranks[1]["deferred_total"]
    assert any(len(set(sizes)) > 1 for _, sizes in rounds[0]), rounds[0]  # some round mixes group sizes
    for a, b in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert len(a["idx"]) == len(b["idx"]) == 8
        assert group_runs(a["idx"] + b["idx"]) == a["sizes"]  # the global round: contiguous groups, in order
    assert [h["curriculum/num_generations"] for h in ranks[0]["history"]] == [
        h["curriculum/num_generations"] for h in ranks[1]["history"]]  # fmt: skip


def test_a_skipping_stage_skips_the_same_prompts_on_every_rank(torchrun_scenarios):
    """G 4 skipping settled prompts, groups spanning both ranks, ranks scoring the mixed prompts differently: both
    ranks skip the same prompts (from the gathered rewards) and sample the same whole groups."""
    ranks = torchrun_scenarios("skip")
    assert ranks[0]["deferred_total"] == ranks[1]["deferred_total"] > 0
    for a, b in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert a["sizes"] == b["sizes"] == [4] and group_runs(a["idx"] + b["idx"]) == [4]
    skipped = [[h.get(f"curriculum/skipped/{r}") for r in ("solved", "failed")] for h in ranks[0]["history"]]
    assert skipped == [[h.get(f"curriculum/skipped/{r}") for r in ("solved", "failed")] for h in ranks[1]["history"]]
    assert any(s != [None, None] and s != [0, 0] for s in skipped), skipped


def test_pilot_groups_are_the_same_on_every_rank(torchrun_scenarios):
    """G 4 with pilot groups of 2 (`skip: {rule: pooled, pilot: 2}`), ranks scoring the mixed prompts differently: both
    ranks plan the same rounds of pilot and full groups from the gathered rewards, and every group is whole."""
    ranks = torchrun_scenarios("skip_pilot")
    rounds = [[(c["step"], c["sizes"]) for c in rank["calls"]] for rank in ranks]
    assert rounds[0] == rounds[1] and ranks[0]["deferred_total"] == ranks[1]["deferred_total"]
    assert rounds[0][0][1] == [2, 2] and any(sizes == [4] for _, sizes in rounds[0]), rounds[0]
    for a, b in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        assert group_runs(a["idx"] + b["idx"]) == a["sizes"]


def test_train_command_under_torchrun_validates_the_real_world_size(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    base = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
            "-m", "grpo_curriculum", "train", str(ROOT / "recipes" / "demo.yaml"), "--max_steps", "2",
            "--warm_start_steps", "0"]  # fmt: skip
    # 2 processes x 8 = generation batch 16: G 2 and 8 fit. `--fsdp` on CPU processes: accelerate trains DDP (it
    # sets up FSDP only on GPU-like devices), and `train` says so; the final model is saved all the same.
    ok = subprocess.run(base + ["--output_dir", str(tmp_path / "ok"), "--per_device_train_batch_size", "8", "--fsdp"],
                        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-3000:]
    warning = "warning: FSDP was requested, but accelerate runs DDP on cpu processes"
    assert "engine: DDP" in ok.stdout and ok.stderr.count(warning) == 1  # (the first process says it)
    assert (tmp_path / "ok" / "model.safetensors").is_file()
    state = json.loads((tmp_path / "ok" / "trainer_state.json").read_text())
    assert [h["curriculum/num_generations"] for h in state["log_history"] if "loss" in h] == [2, 8]
    # 2 processes x 3 = generation batch 6: G 8 does not fit; refused before anything is built or written.
    bad = subprocess.run(base + ["--output_dir", str(tmp_path / "bad"), "--per_device_train_batch_size", "3"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert bad.returncode != 0
    assert "curriculum.stages[1].num_generations = 8" in bad.stderr and "2 processes x 3 per-device batch" in bad.stderr
    # torchrun's launcher prints its own traceback for a failed child; none may come from our code.
    assert 'grpo_curriculum/' not in "".join(bad.stderr.split("Traceback")[1:]) and not (tmp_path / "bad").exists()


def test_rounds_in_increments_agree_and_keep_groups_whole_across_ranks(torchrun_scenarios):
    """
    Top-up, then dynamic sampling, on two ranks that score their rows differently: both ranks plan the same increments
    and keep the same groups (from the gathered rewards); each trains on half of the round, and the round (rank 0's
    rows, then rank 1's) holds each trained group whole and contiguous, rows generated on the other rank included.
    """
    from .conftest import indexed_dataset

    prompts = indexed_dataset(48)["prompt"]
    ranks = torchrun_scenarios("increments")
    plans = [[(r["prompts"], r["increments"], r["sizes"], r["trained"]) for r in rank["rounds"]] for rank in ranks]
    assert plans[0] == plans[1] and len(plans[0]) == 6
    for a, b in zip(ranks[0]["rounds"], ranks[1]["rounds"], strict=True):
        trained = a["trained"] if a["trained"] is not None else range(len(a["sizes"]))
        assert len(a["rows"]) == len(b["rows"]) == 4  # the generation batch, split evenly
        assert a["rows"] + b["rows"] == [prompts[a["prompts"][g]] for g in trained for _ in range(a["sizes"][g])]
        # TRL's `num_items_in_batch`: the loss tokens of the whole round, every rank's (the `dapo` loss's normaliser).
        assert a["num_items_in_batch"] == b["num_items_in_batch"] == a["loss_tokens"] + b["loss_tokens"] > 0
    top_up, dynamic = plans[0][:3], plans[0][3:]
    assert all(len(increments) > 1 and sum(sizes) == 8 for _, increments, sizes, _ in top_up)
    assert any(trained is not None for *_, trained in dynamic)  # some groups dropped, the kept ones redistributed
    assert ranks[0]["history"] == ranks[1]["history"]


def test_rloo_switches_and_per_prompt_rounds_agree_across_ranks(torchrun_scenarios):
    """
    `CurriculumRLOOTrainer` on two ranks that score their rows differently, through G 4, G 16 (the group spans both
    ranks) and a per-prompt stage: both ranks apply the same setting and build the same rounds at every step, log the
    same lines and switches, and each trains on its half of a round of whole contiguous groups whose advantages
    (rank 0's rows, then rank 1's) are RLOO's leave-one-out over each group's own size, from the gathered rewards.
    """
    from .test_rloo import leave_one_out_reference

    ranks = torchrun_scenarios("rloo")
    settings = [[(c["step"], c["num_generations"], c["temperature"], c["sizes"]) for c in rank["calls"]]
                for rank in ranks]  # fmt: skip
    assert settings[0] == settings[1] and len(settings[0]) == 12
    assert [(step, t) for step, _, t, _ in settings[0]] == [(0, 0.7), (1, 0.7), (2, 1.2), (3, 1.2)] + [
        (step, 1.0) for step in range(4, 12)]  # fmt: skip
    assert ranks[0]["switches"] == ranks[1]["switches"] and len(ranks[0]["switches"]) == 2
    assert ranks[0]["history"] == ranks[1]["history"] and len(ranks[0]["history"]) == 12
    assert ranks[0]["deferred_total"] == ranks[1]["deferred_total"]
    rounds = [(a, b, ca, cb) for a, b, ca, cb in zip(ranks[0]["rounds"], ranks[1]["rounds"], ranks[0]["calls"],
                                                     ranks[1]["calls"], strict=True)]  # fmt: skip
    assert [r[0]["sizes"] for r in rounds[:4]] == [[4] * 4, [4] * 4, [16], [16]]
    assert any(len(set(r[0]["sizes"])) > 1 for r in rounds[4:])  # some per-prompt round mixes group sizes
    for a, b, call_a, call_b in rounds:
        assert a["sizes"] == b["sizes"] and a["prompts"] == b["prompts"]
        assert len(call_a["idx"]) == len(call_b["idx"]) == 8
        assert len(set(a["prompts"])) == len(a["prompts"])  # distinct prompts: each run of one prompt is one group
        assert group_runs(call_a["idx"] + call_b["idx"]) == a["sizes"]  # whole contiguous groups, across the ranks
        rewards = [1.0] * 8 + [float(len(c) % 2) for c in call_b["completions"]]  # as each rank scored its rows
        expected = leave_one_out_reference(rewards, a["sizes"], normalize=False)
        assert a["advantages"] + b["advantages"] == pytest.approx(expected, abs=1e-6)
    assert any(abs(x) > 0 for a, b, *_ in rounds for x in a["advantages"] + b["advantages"])


def test_a_reward_failing_on_one_process_stops_every_process_with_its_message(tmp_path):
    """
    Issue 53: under torchrun a reward function that raises on process 1 at step 2 stopped process 1 with its message,
    and left process 0 in TRL's reward gather, which process 1 never reached: a gloo traceback after the message.
    Now the failure is noted and the gather goes on; after it every process stops with process 1's message (exit 2),
    and no traceback comes from the package or TRL.
    """
    (tmp_path / "rank_rewards.py").write_text(
        "import os\n\n\ndef reward(completions, trainer_state=None, **kwargs):\n"
        "    if os.environ.get('RANK') == '1' and trainer_state.global_step >= 1:\n"
        "        raise ValueError('no answer on this process')\n"
        "    return [float(len(str(c))) for c in completions]\n")  # fmt: skip
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((ROOT / "recipes" / "demo.yaml").read_text().replace(
        "grpo_curriculum.demo.tasks:echo_reward", "rank_rewards:reward"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "OMP_NUM_THREADS": "1",
           "WANDB_MODE": "offline"}  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
               "-m", "grpo_curriculum", "train", str(recipe), "--max_steps", "4", "--warm_start_steps", "0",
               "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "run")]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    said = "reward function reward = '8 completions': raised ValueError: no answer on this process"
    assert done.stderr.count("error: 1 problem (training, on process 1)") == 2, done.stderr[-3000:]
    assert done.stderr.count(said) == 2 and "scoring the completions of step 1" in done.stderr
    frames = "".join(done.stderr.split("Traceback")[1:])  # torchrun's launcher prints its own for a failed child
    assert "grpo_curriculum/" not in frames and "/trl/" not in frames and "gloo" not in done.stderr.lower(), frames
