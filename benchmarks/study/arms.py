"""
The study's arms and its runs. An arm is a static G or a variant of an adaptive mode (`MODES`, the first variant of
each mode the library's default before the study chose); every arm of a (task, seed) starts from the same warm start
and prompt order, at temperature `TEMPERATURE`, the same learning rate and the same budget of *generated*
completions (`steps x GENERATION_BATCH`). Each run's record is written to `OUT/runs/TASK__SEED__ARM.json` as it
finishes; a rerun skips those that exist (the warm start of a (task, seed) is recomputed: it is deterministic).

Peer arms (`PEER_MODES`: another package's trainer, benchmark-only, not a dependency of the package) are never tuned
nor chosen as a default; they run on the reported seeds with `--extra` and appear in the report as extra arms against
the reference. `trl_cgrpo`: the published `trl-cgrpo` 0.2.0 (`pip install --no-deps trl-cgrpo==0.2.0`, or
`make study-peers`; it pins TRL < 1.15 but trains with TRL 1.16).
"""

from __future__ import annotations

import importlib.util
import json
import math
import multiprocessing
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from .tasks import (
    CANDIDATES,
    GRADED,
    IMPOSSIBLE,
    MAX_COMPLETION_LENGTH,
    REWARD_FLIP,
    TASKS,
    TEMPERATURE,
    ExactAnswer,
    GenerationCounter,
    Probe,
    budget_callback,
    curriculum_groups,
    evaluator,
    has_settled,
    level_dataset,
    success_histogram,
    warm_model,
    without_settled,
)

GENERATION_BATCH = 128
LEARNING_RATE = 1e-3  # chosen on tuning seeds 100, 101 (docs/study.md): every static arm and rule rose at it
STEPS = 48  # budget: STEPS x GENERATION_BATCH generated completions a run
POINTS = 16  # evaluations after step 0
REPORTED = 12
TUNING = 6
TUNING_SEED_BASE = 100  # tuning seeds: 100, 101, ...
DYNAMIC_ROUNDS = 4  # max_rounds of a `dynamic_gN` arm (`dynamic_gN_r2`: 2)
MODES = {  # mode: its variants (arm names), the first one the library's default when the study began
    "static": [f"static_g{g}" for g in CANDIDATES],
    "per_prompt": ["per_prompt", "per_prompt_variance", "per_prompt_nodefer", "per_prompt_stream",
                   "per_prompt_stream_uniform", "per_prompt_stream_hard", "per_prompt_skip", "per_prompt_skip_wide",
                   "per_prompt_evidence", "per_prompt_evidence_wide", "per_prompt_evidence_g4"],
    "top_up": ["top_up", "top_up_p16"],
    # issue 50: a stage of one G that skips settled prompts (`Stage(num_generations=G, skip=...)`), evidence by default
    "skip": ["static_g4_skip", "static_g4_skip_greso", "static_g4_skip_t15", "static_g8_skip", "static_g2_skip",
             "static_g4_skip_e05", "static_g4_skip_e20", "static_g8_skip_e05",
             # issue 50's second round: the pooled point-mass rule, pilot groups of N (`_pN`), and both
             "static_g4_skip_pooled", "static_g4_skip_p2", "static_g4_skip_pooled_p2", "static_g8_skip_p2",
             "static_g8_skip_pooled_p2", "static_g8_skip_p4", "static_g8_skip_pooled",
             # skipping solved prompts only (never for failing), issue 50's third candidate rule
             "static_g4_skip_solved", "static_g4_skip_solved_p2",
             # issue 50's third round: the pooled rule exploring from 5% or 20% (`Skip(explore=...)`)
             "static_g4_skip_pooled_e05", "static_g4_skip_pooled_e20"],
    "dynamic": ["dynamic_g4", "dynamic_g8", "dynamic_g16", "dynamic_g4_r2", "dynamic_g8_r2"],
    # coarse to fine comparisons (issue 29) at the G of the reference static arm the tuning seeds chose (16)
    "comparison": ["comparison_extremes_g16", "comparison_margin_g16"],
    # another package's trainer on the same budget, warm start, prompts, temperature, learning rate and evaluation
    # (`PEER_MODES`: never tuned, never a default; `--extra` only)
    "peer": ["trl_cgrpo"],
    # issue 39's row: TRL's RLOOTrainer (`CurriculumRLOOTrainer`, RLOOConfig's defaults: beta 0.05, no advantage
    # normalisation) at static G and with the library's per-prompt default; never tuned, never a default
    "rloo": ["rloo_static_g4", "rloo_static_g8", "rloo_per_prompt"],
    # issue 42's oracle: static G on the task's prompts less the settled ones (`tasks.without_settled`: what skipping
    # settled prompts buys with perfect knowledge and no cost of finding out); tasks with settled prompts only
    "oracle": ["oracle_g4", "oracle_g8"],
    # issue 50's reachable ceiling: static G on every training prompt once (a seeded shuffle), then only the
    # non-settled ones; what a rule that pays a full first visit a prompt can reach (tasks with settled prompts only)
    "ceiling": ["ceiling_g4", "ceiling_g8"],
    # the noise floor of a paired difference: static G 4 again with the trainer seeded apart (`CONTROL_SEED_OFFSET`:
    # another prompt order and other samples, the same warm start and evaluation), a change that should not matter;
    # its difference to static G 4 is how far two equally good arms land apart on a seed (never tuned, `--extra`)
    "control": ["static_g4_reseeded"],
}
PEER_MODES = ("peer", "rloo", "oracle", "ceiling", "control")
CONTROL_SEED_OFFSET = 100_000
KNOWS_SETTLED = ("oracle", "ceiling")  # modes told which prompts are settled: tasks with settled prompts only
ARMS = [arm for arms in MODES.values() for arm in arms]
LIBRARY_ARMS = [arm for mode, arms in MODES.items() if mode not in PEER_MODES for arm in arms]  # the tuning phase's
PEER_PACKAGES = {"trl_cgrpo": ("trl_cgrpo", "pip install --no-deps trl-cgrpo==0.2.0")}  # arm: (module, install)
# `trl_cgrpo` (trl-cgrpo 0.2.0's `CGRPOTrainer`): each prompt is sampled along `budget_grid` = CANDIDATES (2, 4, 8, 16:
# the study's candidates; its default grid adds 32) and stops at the first budget whose split-conformal set of its
# answers is a singleton; a stopped prompt's group is padded to width 16 with masked rows that are never generated (not
# counted: it generates through `model.generate`, so `GenerationCounter` counts what it generates). Its geometry knob
# is the prompts a step (rows = prompts x 16): `CGRPO_MEAN_G` 8 gives 16 prompts, 256 rows, i.e. the study's round of
# 128 completions at a mean G of 8 (`top_up_p16`'s geometry; trl-cgrpo's mean G on `prefix_levels` in the first study
# was 8.0, and 8.1 on `prefix_settled` seed 0's first steps), so a step generates 32-256 completions, and the run stops
# at the first step that reaches the budget of generated completions, like the others (up to one step, 256, past it).
# Everything else is its default: `score` "aps" (its score for tasks with a comparable final answer; the answer is the
# completion's text, [`cgrpo_answer`]), `delta` None (from the calibration solve rate + `delta_margin` 0.05),
# `recalibrate_every` 50 steps, `calibration_batch_size` (a call's rows = a step's), the whole calibration set
# (`CGRPO_CALIBRATION` prompts of the task's mix, seeded apart from the training and held-out prompts). Its calibration
# rollouts (`CGRPO_CALIBRATION` x 16 a calibration) are generated completions: counted in the budget and recorded apart
# (`calibration`). The probe sees each step's groups without their padding ([`cgrpo_groups`]): the same as the others'.
CGRPO_MEAN_G = 8
CGRPO_CALIBRATION = 32  # calibration prompts (512 completions a calibration, 8% of the 6,144 budget)
CALIBRATION_PROMPT_SEED = 20_000
CGRPO_EOS = "<eos>"  # the answer of a level-0 prompt (`<eos>` alone decodes to ""; trl-cgrpo drops "" as unparsed)
CGRPO_UNSOLVABLE = "<unsolvable>"  # an impossible prompt's reference answer: never decoded, as its reward is never 1
SKIP_ARMS = {  # the fixed-kind check's best knobs (benchmarks/study/fixed_kinds.py), explicit
    # `per_prompt_skip`: the stream's next prompts (lookahead 0), settled ones skipped with GRESO's probabilities
    "per_prompt_skip": {"weight": "hard", "lookahead": 0, "defer": True, "skip_target": 0.05, "skip": "greso"},
    # `per_prompt_skip_wide`: 32 prompts a round (mean G 4) chosen from a window of 64, settled ones skipped
    "per_prompt_skip_wide": {"weight": "hard", "lookahead": 32, "defer": True, "skip_target": 0.05,
                             "mean_generations": 4, "skip": "greso"},
    # issue 42: skipping from evidence (a prompt that ever succeeded is never deferred for failing; the round takes
    # the best half of twice its prompts, the rest skipped for the pass; the pass's end not filled with skipped ones)
    "per_prompt_evidence": {"weight": "hard", "lookahead": 0, "defer": True, "skip_target": 0.05, "skip": "evidence"},
    # issue 50: one candidate G 4 with skipping from evidence (static G 4 that skips settled prompts)
    "per_prompt_evidence_g4": {"num_generations": (4,), "lookahead": 0, "defer": True, "skip_target": 0.05,
                               "skip": "evidence"},
    # the same comparing three times the round's prompts (23 more: the round's M at the candidates' geometric mean)
    "per_prompt_evidence_wide": {"weight": "hard", "lookahead": 23, "defer": True, "skip_target": 0.05,
                                 "skip": "evidence"},
}


def mode_of(arm: str) -> str:
    return next(mode for mode, arms in MODES.items() if arm in arms)


def trainer_seed(arm: str, seed: int) -> int:
    """The trainer's seed (`GRPOConfig.seed`: its prompt order and samples): the run's seed, or for the control arm the
    run's seed plus `CONTROL_SEED_OFFSET` (the same warm start, prompts and evaluation as the run's seed)."""
    return seed + (CONTROL_SEED_OFFSET if mode_of(arm) == "control" else 0)


def peer_missing(arm: str) -> str | None:
    """The install command of a peer arm whose package is not importable; `None` when it is, or for a library arm."""
    module, install = PEER_PACKAGES.get(arm, (None, None))
    return None if module is None or importlib.util.find_spec(module) is not None else install


def arm_stages(arm: str):
    """The stages of an arm of this study (the rule variants of `MODES`)."""
    from grpo_curriculum import Adaptive, DynamicSampling, Stage

    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")
    if arm in PEER_PACKAGES:
        raise ValueError(f"{arm!r} is a peer arm (another package's trainer, run by `run_arm`): it has no stages")
    t = TEMPERATURE
    if arm == "rloo_per_prompt":  # the library's per-prompt default (no knob set)
        return [Stage(temperature=t, name=arm, adaptive=Adaptive(num_generations=CANDIDATES, policy="per_prompt"))]
    if mode_of(arm) in KNOWS_SETTLED:  # static G (on the prompts, in the order, `run_arm` gives it)
        return [Stage(num_generations=int(arm.rpartition("_g")[2]), temperature=t)]
    if mode_of(arm) == "control":  # static G, the trainer seeded apart (`run_arm`)
        return [Stage(num_generations=int(arm.removeprefix("static_g").partition("_")[0]), temperature=t)]
    if mode_of(arm) == "skip":  # `static_gN_skip[_greso | _pooled][_tNN][_eNN][_pN]`: rule evidence (or GRESO's,
        size, _, variant = arm.removeprefix("static_g").partition("_skip")  # or pooled), target 0.05 (or NN %),
        skip = {"rule": "evidence", "target": 0.05, "explore": 0.5}  # exploring from 0.5 (or NN %), no pilot (or N)
        for part in variant.split("_")[1:]:
            if part in ("greso", "pooled", "solved"):
                skip["rule"] = part
            else:
                skip[{"t": "target", "e": "explore", "p": "pilot"}[part[0]]] = (
                    int(part[1:]) if part[0] == "p" else int(part[1:]) / 100)
        return [Stage(num_generations=int(size), temperature=t, name=arm, skip=skip)]
    arm = arm.removeprefix("rloo_")  # `rloo_static_gN`: static_gN's stages on RLOO
    if arm.startswith("static_g"):
        return [Stage(num_generations=int(arm.removeprefix("static_g")), temperature=t)]
    if arm in SKIP_ARMS:  # issue 37: GRESO's skipping of settled prompts (`defer`) on top of the per-prompt knapsack
        knobs = {"num_generations": CANDIDATES, **SKIP_ARMS[arm]}
        return [Stage(temperature=t, name=arm, adaptive=Adaptive(policy="per_prompt", **knobs))]
    if arm.startswith("per_prompt"):
        weight = {"per_prompt_variance": "variance", "per_prompt_stream_uniform": "uniform",
                  "per_prompt_stream_hard": "hard"}.get(arm, "knapsack")
        # `per_prompt_stream`: Knapsack RL's geometry, the round's prompts in stream order (`lookahead` 0: no prompt
        # waits) and none deferred: only their G is chosen, so the prompt mix is a static G's
        # `per_prompt_stream_uniform`: the same with the weight `uniform` (the expected number of informative groups)
        knobs = ({"lookahead": 0, "defer": False} if arm.startswith("per_prompt_stream")
                 else {"lookahead": 2, "defer": arm != "per_prompt_nodefer",
                       "skip": "greso"})  # explicit: the study outlives defaults
        return [Stage(temperature=t, name=arm,
                      adaptive=Adaptive(num_generations=CANDIDATES, policy="per_prompt", weight=weight,
                                        **knobs))]  # fmt: skip
    if arm.startswith("top_up"):  # `top_up`: 32 prompts a round (mean G 4), `top_up_p16`: 16 (mean G 8); explicit,
        prompts = 16 if arm == "top_up_p16" else 32  # as the default round size changed (to p16's) after this study
        return [Stage(temperature=t, name=arm,
                      adaptive=Adaptive(num_generations=CANDIDATES, policy="top_up", prompts=prompts))]
    if arm.startswith("dynamic_g"):  # `_r2`: at most 2 generation rounds a batch instead of 4
        size, _, rounds = arm.removeprefix("dynamic_g").partition("_r")
        return [Stage(num_generations=int(size), temperature=t, name=arm,
                      dynamic_sampling=DynamicSampling(max_rounds=int(rounds or DYNAMIC_ROUNDS),
                                                       on_limit="mask"))]  # fmt: skip
    if arm == "comparison_extremes_g16":  # only the best and worst of each group for the first half, then all
        return [Stage(num_generations=16, temperature=t, name="extremes", until_fraction=0.5,
                      comparison={"mode": "extremes"}),
                Stage(num_generations=16, temperature=t, name="all")]  # fmt: skip
    if arm == "comparison_margin_g16":  # completions >= 1 group std from the mean, the margin falling to 0
        return [Stage(num_generations=16, temperature=t, name=arm,
                      comparison={"mode": "margin", "margin": 1.0, "margin_end": 0.0})]  # fmt: skip
    raise ValueError(f"unknown arm {arm!r}; use one of {ARMS}")


def run_arm(task: str, arm: str, seed: int, steps: int, points: int, warm: dict, *,
            generation_batch: int = GENERATION_BATCH, learning_rate: float = LEARNING_RATE, stages=None,
            max_grad_norm: float | None = None, reward_flip: float = 0.0) -> dict:  # fmt: skip
    """
    Train one arm from the warm start to `steps x generation_batch` generated completions; its record. `stages`: the
    arm's stages when not [`arm_stages`]'s (a peer arm has none: ignored); `max_grad_norm`: the gradient
    clipping norm (`None`: the `GRPOConfig` default); `reward_flip`: each training reward is flipped with this
    probability (a noisy reward; the evaluation stays exact). A peer arm's record adds `calibration` (`trl_cgrpo`: the
    completions its calibrations generated, part of `generated`).
    """
    import copy

    from transformers import PrinterCallback

    if mode_of(arm) in KNOWS_SETTLED and not has_settled(task):
        raise ValueError(f"the {mode_of(arm)} arm {arm!r} needs a task with settled prompts; {task!r} has none")
    if install := peer_missing(arm):
        raise ImportError(f"the study's arm `{arm}` needs its package: {install} (or `make study-peers`)")

    start = time.perf_counter()
    budget = steps * generation_batch
    model, tokenizer = copy.deepcopy(warm["model"]), warm["tokenizer"]
    counter = GenerationCounter(model)
    reward = ExactAnswer(tokenizer, flip=reward_flip, seed=seed, graded=task in GRADED)
    start_histogram = success_histogram(model, warm)
    recorder = budget_callback(evaluator(warm, reward), counter, budget, points)
    common = dict(temperature=TEMPERATURE, max_completion_length=MAX_COMPLETION_LENGTH, learning_rate=learning_rate,
                  lr_scheduler_type="constant", logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                  bf16=False, seed=trainer_seed(arm, seed), disable_tqdm=True)  # fmt: skip
    if max_grad_norm is not None:
        common["max_grad_norm"] = max_grad_norm
    with tempfile.TemporaryDirectory() as output_dir:
        from trl import GRPOConfig

        from grpo_curriculum.training.callback import CurriculumCallback
        from grpo_curriculum.training.trainer import CurriculumGRPOTrainer

        calibration = None
        if arm == "trl_cgrpo":
            trainer, calibration = cgrpo_trainer(task, seed, model, tokenizer, reward, recorder, counter, output_dir,
                                                 budget, generation_batch, warm["train"], common)  # fmt: skip
            groups, increments = cgrpo_groups(trainer), False  # one reward call a step: its groups, padding left out
        else:
            stages = arm_stages(arm) if stages is None else stages
            config, trainer_class = GRPOConfig, CurriculumGRPOTrainer
            if arm.startswith("rloo_"):
                from trl import RLOOConfig

                from grpo_curriculum import CurriculumRLOOTrainer

                config, trainer_class = RLOOConfig, CurriculumRLOOTrainer
            args = config(output_dir=output_dir, per_device_train_batch_size=generation_batch, max_steps=steps,
                          num_generations=stages[0].num_generations, **common)  # fmt: skip
            train = warm["train"]
            if mode_of(arm) == "oracle":  # the settled prompts never sampled
                train = without_settled(train)
            elif mode_of(arm) == "ceiling":  # each settled prompt sampled once, in the arm's order
                train, args.shuffle_dataset = ceiling_order(train, seed, budget // args.num_generations), False
            trainer = trainer_class(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                                    train_dataset=train, callbacks=[CurriculumCallback(stages), recorder])
            groups = curriculum_groups(trainer)
            # rounds sampled in increments: the probe groups rows by prompt
            increments = any(st.dynamic_sampling is not None
                             or (st.adaptive is not None and st.adaptive.policy == "top_up") for st in stages)
        trainer.remove_callback(PrinterCallback)
        probe = Probe(model, reward, None if increments else groups, round_size=generation_batch)
        reward.observer = probe
        trainer.train()
    history = trainer.state.log_history
    deferred = [h["curriculum/deferred_total"] for h in history if "curriculum/deferred_total" in h]
    lines = [h for h in history if "loss" in h]  # the training log lines (one a step)
    shares = [h["curriculum/informative_share"] for h in lines if h.get("curriculum/informative_share") is not None]
    logged = {"generated": sum(h.get("curriculum/generated", 0) for h in lines),
              "dropped": sum(h.get("curriculum/dropped", 0) for h in lines),
              "increments": statistics.fmean(h.get("curriculum/increments", 1) for h in lines) if lines else math.nan,
              "informative_steps": sum(share >= 1 - 1e-9 for share in shares) / len(shares) if shares else math.nan}
    peer = {}
    if calibration is not None:  # trl_cgrpo: its calibration completions (in `generated`) and its own logs
        mean_k = [h["cgrpo/mean_k"] for h in history if "cgrpo/mean_k" in h]
        peer = {"calibration": calibration[0]}
        logged.update({"mean_k": statistics.fmean(mean_k) if mean_k else math.nan,
                       "delta": [h["cgrpo/delta"] for h in history if "cgrpo/delta" in h],
                       "calibration_solve_rate": [h["cgrpo/calibration_solve_rate"] for h in history
                                                  if "cgrpo/calibration_solve_rate" in h]})  # fmt: skip
    return {
        "task": task, "arm": arm, "seed": seed, "budget": budget, "steps": trainer.state.global_step,
        "generated": counter.count, "eval": recorder.points, "probe": probe.summary(),
        "deferred": deferred[-1] if deferred else 0,
        "success_histogram": {"start": start_histogram, "end": success_histogram(model, warm)},
        "logged": logged,
        "train_time": recorder.train_time, "eval_time": recorder.eval_time, "run_time": time.perf_counter() - start,
        **peer,
    }  # fmt: skip


def ceiling_order(train, seed: int, visits: int):
    """
    The ceiling arm's prompts in training order: every prompt once (a seeded shuffle), then the non-settled ones
    ([`without_settled`]), reshuffled each pass, to `visits` prompts or more: a rule that learns a prompt is settled at
    its first visit and never samples it again.
    """
    import datasets

    passes, rest = [train.shuffle(seed=seed)], without_settled(train)
    while sum(len(p) for p in passes) < visits:
        passes.append(rest.shuffle(seed=seed + len(passes)))
    return datasets.concatenate_datasets(passes)


def cgrpo_calibration(task: str, seed: int):
    """
    trl_cgrpo's calibration prompts: `CGRPO_CALIBRATION` prompts of the task's training mix (impossible ones included),
    seeded apart from the training and held-out prompts; column `answer`: the reference answer as its
    `answer_extractor` ([`cgrpo_answer`]) decodes it (`CGRPO_UNSOLVABLE` for an impossible prompt).
    """
    weights = TASKS[task][1]
    data = level_dataset(task, CGRPO_CALIBRATION, CALIBRATION_PROMPT_SEED + seed, weights, IMPOSSIBLE.get(task, 0.0))
    answers = [cgrpo_answer(t) if ok else CGRPO_UNSOLVABLE for t, ok in zip(data["target"], data["solvable"],
                                                                            strict=True)]  # fmt: skip
    return data.add_column("answer", answers)


def cgrpo_answer(text: str) -> str:
    """trl_cgrpo's `answer_extractor`: a completion's answer is its whole text (`CGRPO_EOS` for `<eos>` alone). It sees
    text decoded without special tokens, so a completion that holds another special token (`<pad>`, `<unk>`, `<bos>`)
    between the right words reads as right, where the reward's token comparison says wrong (rare)."""
    return text.strip() or CGRPO_EOS


def cgrpo_groups(trainer):
    """Group rows of a `CGRPOTrainer` batch: blocks of `num_generations`, less the rows it padded (never generated)."""

    def rows(n: int) -> list[list[int]]:
        width, padded = trainer.num_generations, trainer._padded_rows or [False] * n
        return [[i for i in range(s, s + width) if not padded[i]] for s in range(0, n, width)]

    return rows


def cgrpo_trainer(task, seed, model, tokenizer, reward, recorder, counter, output_dir, budget, generation_batch, train,
                  common):  # fmt: skip
    """The `trl_cgrpo` arm's trainer (knobs: the comment at `CGRPO_MEAN_G`) and its calibration count (a one-item
    list: the completions its calibrations generated, counted at `model.generate`)."""
    try:
        from trl_cgrpo import CGRPOConfig, CGRPOTrainer
    except ImportError as error:
        raise ImportError(f"the study's arm `trl_cgrpo` needs trl-cgrpo 0.2.0: {PEER_PACKAGES['trl_cgrpo'][1]} "
                          "(or `make study-peers`)") from error  # fmt: skip
    width, prompts = max(CANDIDATES), generation_batch // CGRPO_MEAN_G
    args = CGRPOConfig(output_dir=output_dir, budget_grid=list(CANDIDATES),
                       per_device_train_batch_size=prompts * width,  # rows: padded to width 16, not all generated
                       max_steps=budget // (prompts * min(CANDIDATES)) + 1,  # the budget stops it first
                       **common)  # fmt: skip
    trainer = CGRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=train,
                           processing_class=tokenizer, calibration_dataset=cgrpo_calibration(task, seed),
                           answer_extractor=cgrpo_answer, callbacks=[recorder])  # fmt: skip
    calibration, calibrate = [0], trainer.calibrate

    def counted_calibrate():  # on the instance: the peer calls `self.calibrate()`
        before = counter.count
        try:
            return calibrate()
        finally:
            calibration[0] += counter.count - before

    trainer.calibrate = counted_calibrate
    return trainer, calibration


def machine() -> dict:
    """Where a run ran (issue 50: runs reproduce on one machine, not across CPUs): the CPU model, Python and the
    libraries' versions."""
    import platform

    import torch
    import transformers
    import trl

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "python": platform.python_version(), "torch": torch.__version__, "trl": trl.__version__,
            "transformers": transformers.__version__}  # fmt: skip


def run_path(out: Path, task: str, seed: int, arm: str) -> Path:
    return out / "runs" / f"{task}__{seed}__{arm}.json"


def run_job(job: tuple) -> list[str]:
    """One (task, seed): the warm start, then each arm not yet on disk, each record written as it finishes."""
    import torch
    from transformers import logging as hf_logging

    from grpo_curriculum.training.files import atomic_write

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    out, task, seed, arms, steps, points = job
    arms = [a for a in arms if not run_path(out, task, seed, a).exists()]
    if not arms:
        return []
    t0 = time.perf_counter()
    warm = warm_model(task, seed)
    warm_time = time.perf_counter() - t0
    done = []
    for arm in arms:
        run = run_arm(task, arm, seed, steps, points, warm, reward_flip=REWARD_FLIP.get(task, 0.0))
        run["warm_time"], run["warm_steps"], run["machine"] = warm_time, warm["warm_steps"], machine()
        path = run_path(out, task, seed, arm)
        atomic_write(path, lambda f, run=run: json.dump(run, f, separators=(",", ":")))
        done.append(str(path))
        probe = run["probe"]
        print(f"  {time.strftime('%H:%M:%S')} {task} seed {seed:>3} {arm:>20}: exact {run['eval'][0]['exact']:.3f} "
              f"-> {run['eval'][-1]['exact']:.3f}, {run['generated']} completions in {run['steps']} steps, "
              f"informative {probe['informative'] / max(1, probe['completions']):.2f}, "
              f"train {run['train_time']:.0f} s, run {run['run_time']:.0f} s", flush=True)  # fmt: skip
    return done


def load_runs(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def run_jobs(jobs: list[tuple], processes: int) -> None:
    jobs = [j for j in jobs if any(not run_path(j[0], j[1], j[2], a).exists() for a in j[3])]
    if not jobs:
        return
    with multiprocessing.get_context("spawn").Pool(processes, maxtasksperchild=1) as pool:
        for _ in pool.imap_unordered(run_job, jobs):
            pass
