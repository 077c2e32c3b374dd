"""
The study's tasks on the tiny model (`grpo_curriculum.demo.tasks`), its warm start, its exact reward and evaluation,
and the probe of where the completions went.

Tasks (`TASKS`): `"echo k : w1 w2 w3 w4 ="` (k a digit word) must be answered with exactly the tokens of the first k
words and `<eos>` (reward 1, else 0). The words to copy sit at the same distance from the answer at every level, so
copying learned at level k carries to level k+1 and only where to stop is new. The model is warm-started on a mix
weighted to levels 1-2 until level 2's exact success at the training temperature reaches `WARM_GATE`.

- `prefix_levels`: levels k = 1-4 in equal shares: a moving frontier (level k+1 becomes solvable after level k);
- `prefix_tail`: levels drawn 1 : 1 : 3 : 5, so 80% of the prompts are levels 3-4, hard but solvable after the warm
  start (a long tail of hard prompts, the regime where Knapsack RL and GRESO report their gains);
- `prefix_noisy`: `prefix_levels` (the same prompts and warm start a seed) with every training reward flipped with
  probability 0.1 (`REWARD_FLIP`); the exact evaluation stays noise-free.
- `prefix_settled` (issue 37: the regime of real RLVR data, where many groups have zero variance): a third of the
  training prompts are level 0 (`"echo zero : ... ="`, answered by `<eos>` alone; the warm start includes them, and
  solves them), a quarter (`IMPOSSIBLE`) are impossible, their reward always 0 (a wrong reference answer), the rest
  are levels 1-4 in equal shares, as in `prefix_levels` (level 4 mostly rare-success after the warm start, and
  learnable). Evaluation: levels 1-4 in equal shares (`EVAL_WEIGHTS`), the same metric as `prefix_levels`.
- `prefix_graded`: `prefix_levels` with partial credit (`GRADED`): the share of the answer's k + 1 tokens (its words
  and `<eos>`) right at their positions, so rewards are not Bernoulli and a comparison has something to rank. The
  exact evaluation is the exact-answer probability, as on every task.
- `settled_heavy`, `settled_tail` (issue 42, tuning only): `prefix_settled` with other shares of solved, impossible
  and rare-success prompts, so a default chosen on the tuning seeds is not fitted to one mix.

Settled prompts ([`has_settled`], [`without_settled`]): a level-0 prompt is solved by the warm start, an impossible
one is never rewarded; the oracle arms (mode `oracle` of `arms.MODES`) train on the task's prompts without them.

Evaluation: the exact probability that the policy, sampling at `EVAL_TEMPERATURE`, answers a held-out prompt
correctly (teacher forcing over the answer tokens and `<eos>`: [`answer_probability`]), averaged over `EVAL_PROMPTS`
fixed prompts; no sampling noise. The sampled reward (`EVAL_SAMPLES` completions a prompt, fixed seed) is secondary.
"""

from __future__ import annotations

import math
import random
import statistics
import time

from common import HeldOut  # benchmarks/common.py

CANDIDATES = (2, 4, 8, 16)
TEMPERATURE = 0.9
MAX_LEVEL = 4
MAX_COMPLETION_LENGTH = MAX_LEVEL + 1  # the longest answer and <eos>
TRAIN_PROMPTS = 256
EVAL_PROMPTS = 256
EVAL_TEMPERATURE = 0.5
EVAL_SAMPLES = 4
EVAL_SEED = 1234
EVAL_PROMPT_SEED = 10_000
SUCCESS_BINS = (0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0)
WARM_CHUNK = 10
WARM_GATE = (2, 0.4)  # the warm start stops when level 2's exact success at the training temperature reaches 0.4
CHECK_PROMPT_SEED = 30_000
TASKS = {  # name: (description, level weights of training / eval prompts, warm-start level weights, most warm steps)
    "prefix_levels": ("repeat the first k = 1-4 of 4 words exactly, then <eos>; warm-started mostly on k <= 2",
                      (1, 1, 1, 1), (8, 8, 1, 1), 300),
    "prefix_tail": ("repeat the first k = 1-4 of 4 words exactly, then <eos>; levels 1:1:3:5 (80% are levels 3-4, "
                    "hard after the warm start)", (1, 1, 3, 5), (8, 8, 1, 1), 300),
    "prefix_noisy": ("prefix_levels with every training reward flipped with probability 0.1 (the exact evaluation "
                     "is noise-free)", (1, 1, 1, 1), (8, 8, 1, 1), 300),
    "prefix_settled": ("settled prompts: a third solved (level 0: answer <eos>), a quarter impossible (reward always "
                       "0), the rest levels 1-4 of prefix_levels", (16, 5, 5, 5, 5), (4, 8, 8, 1, 1), 300),
    "prefix_graded": ("prefix_levels with partial credit: the share of the answer's tokens right at their positions",
                      (1, 1, 1, 1), (8, 8, 1, 1), 300),
    # issue 42's tuning-only variants of `prefix_settled` (other shares of solved, impossible and rare prompts), so the
    # per-prompt default is not fitted to one mix: never reported (`REPORTED_TASKS`)
    "settled_heavy": ("prefix_settled with more settled prompts: 40% impossible, about 37% of the rest solved (level "
                      "0)", (12, 5, 5, 5, 5), (4, 8, 8, 1, 1), 300),
    "settled_tail": ("prefix_settled with a harder tail and fewer impossible ones: 15% impossible, levels 0-4 drawn "
                     "8 : 2 : 2 : 6 : 10 (most solvable prompts rare-success after the warm start)",
                     (8, 2, 2, 6, 10), (4, 8, 8, 1, 1), 300),
}  # fmt: skip
REPORTED_TASKS = ("prefix_levels", "prefix_tail", "prefix_noisy", "prefix_settled", "prefix_graded")
"""The study's five reported tasks (the others of `TASKS` are tuning-only variants)."""
REWARD_FLIP = {"prefix_noisy": 0.1}  # a task's training rewards are flipped with this probability
IMPOSSIBLE = {"prefix_settled": 0.25, "settled_heavy": 0.4, "settled_tail": 0.15}
"""The share of a task's training prompts whose reward is always 0."""
GRADED = {"prefix_graded"}  # tasks with partial credit
EVAL_WEIGHTS = {"prefix_settled": (0, 1, 1, 1, 1), "settled_heavy": (0, 1, 1, 1, 1), "settled_tail": (0, 1, 1, 3, 5)}
"""A task's evaluation level weights, when not its training ones."""


def has_settled(task: str) -> bool:
    """Whether the task's training prompts include settled ones (level 0: solved; impossible), known to the study."""
    return IMPOSSIBLE.get(task, 0.0) > 0 or len(TASKS[task][1]) > MAX_LEVEL


def without_settled(train):
    """The training prompts less the settled ones (level 0, impossible): the oracle's prompts, in the same order."""
    return train.filter(lambda row: row["solvable"] and row["level"] > 0)


def level_dataset(task: str, num_prompts: int, seed: int, weights: tuple[int, ...], impossible: float = 0.0):
    """
    Prompts of `task` whose level k is drawn with `weights` (levels 1, 2, ...; 0, 1, ... when `weights` has
    `MAX_LEVEL + 1` entries); columns `prompt`, `target`, `level`, `solvable`.
    `prefix_levels`: `"echo k : w1 ... w4 ="` (k a digit word), answer the first k words. The words to copy sit at the
    same distance from the answer at every level, so copying transfers from level to level and only where to stop is
    new. `impossible`: the share of prompts (drawn after the others, so the solvable ones are the same prompts as
    without) whose reward is always 0 (`solvable` False).
    """
    from datasets import Dataset

    from grpo_curriculum.demo.tasks import DIGITS, WORDS

    rng = random.Random(seed)
    rows = {"prompt": [], "target": [], "level": []}
    for _ in range(num_prompts):
        first = int(len(weights) <= MAX_LEVEL)
        level = rng.choices(range(first, first + len(weights)), weights=weights)[0]
        words = [rng.choice(WORDS) for _ in range(MAX_LEVEL)]
        rows["prompt"].append(f"echo {DIGITS[level]} : " + " ".join(words) + " =")
        rows["target"].append(" ".join(words[:level]))
        rows["level"].append(level)
    unsolvable = set(random.Random(seed + 7).sample(range(num_prompts), round(impossible * num_prompts)))
    rows["solvable"] = [i not in unsolvable for i in range(num_prompts)]
    return Dataset.from_dict(rows)


class ExactAnswer:
    """
    The reward: 1.0 when the completion's tokens are exactly the target's and `<eos>`, else 0.0, so the correct answer
    is one token sequence and its probability can be computed exactly; `graded`: the share of the answer's tokens
    right at their positions (partial credit). A prompt whose `solvable` is False always gets 0.
    `observer(prompts, target, rewards, solvable)`, when set, sees every call (the mechanism probe).
    """

    __name__ = "exact_answer"

    def __init__(self, tokenizer, flip: float = 0.0, seed: int = 0, graded: bool = False):
        self.tokenizer, self.observer, self._ids, self.graded = tokenizer, None, {}, graded
        self.flip, self._rng = flip, random.Random(seed)  # a noisy reward: each one flipped with probability `flip`

    def answer_ids(self, target: str) -> list[int]:
        if target not in self._ids:
            self._ids[target] = self.tokenizer(target).input_ids + [self.tokenizer.eos_token_id]
        return self._ids[target]

    def credit(self, ids, target: str) -> float:
        answer = self.answer_ids(target)
        if not self.graded:
            return float(list(ids) == answer)
        return sum(a == b for a, b in zip(ids, answer)) / len(answer)

    def __call__(self, prompts, completions, completion_ids, target, solvable=None, **kwargs) -> list[float]:
        solvable = [True] * len(target) if solvable is None else list(solvable)
        rewards = [self.credit(ids, t) if ok else 0.0
                   for ids, t, ok in zip(completion_ids, target, solvable, strict=True)]  # fmt: skip
        if self.flip:
            rewards = [1.0 - r if self._rng.random() < self.flip else r for r in rewards]
        if self.observer is not None:
            self.observer(prompts, target, rewards, solvable)
        return rewards


class GenerationCounter:
    """Counts the rows `model.generate` returns (wraps it on the instance); `paused` stops counting (evaluation)."""

    def __init__(self, model):
        self.count, self.paused = 0, False
        generate = model.generate

        def counted(*args, **kwargs):
            out = generate(*args, **kwargs)
            if not self.paused:
                self.count += out.shape[0]
            return out

        model.generate = counted


class Probe:
    """
    Per training round: each group's real size, whether its rewards differ (informative) and the exact probability of
    its prompt's answer at the training temperature under the policy that generated it. `group_rows()` returns the
    round's groups as lists of row indices (real rows only); `None` groups rows by prompt instead, over reward calls
    until `round_size` rows are in, then counts them (a top-up round's increments, or a dynamic-sampling round).
    """

    def __init__(self, model, reward: ExactAnswer, group_rows, round_size: int):
        self.model, self.reward, self.group_rows, self.round_size = model, reward, group_rows, round_size
        self.completions = self.informative = 0
        self.bins = [[0, 0, 0] for _ in SUCCESS_BINS[1:]]  # per bin: groups, completions, informative completions
        self.impossible = [0, 0, 0]  # the same for the impossible prompts (all in the first bin: their success is 0)
        self._pending = {}  # by-prompt mode: prompt -> (target, rewards so far), in first-seen order

    def __call__(self, prompts, target, rewards, solvable) -> None:
        if self.group_rows is None:
            for prompt, t, r, ok in zip(prompts, target, rewards, solvable, strict=True):
                self._pending.setdefault(prompt, (t, ok, []))[2].append(r)
            if sum(len(r) for *_, r in self._pending.values()) < self.round_size:
                return
            pending, self._pending = self._pending, {}
            prompts = [p for p, (*_, r) in pending.items() for _ in r]
            target = [t for t, _, r in pending.values() for _ in r]
            solvable = [ok for _, ok, r in pending.values() for _ in r]
            rewards = [v for *_, r in pending.values() for v in r]
            sizes = [len(r) for *_, r in pending.values()]
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            groups = [list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)]
        else:
            groups = self.group_rows(len(rewards))
        self._count(prompts, target, rewards, solvable, groups)

    def _count(self, prompts, target, rewards, solvable, groups) -> None:
        tokenizer = self.reward.tokenizer
        heads = [rows[0] for rows in groups]
        prompt_ids = [tokenizer(prompts[i]).input_ids for i in heads]
        answer_ids = [self.reward.answer_ids(target[i]) for i in heads]
        probabilities = answer_probability(self.model, prompt_ids, answer_ids, TEMPERATURE)
        probabilities = [p if solvable[i] else 0.0 for p, i in zip(probabilities, heads, strict=True)]  # training's
        for rows, p in zip(groups, probabilities, strict=True):
            values = [rewards[i] for i in rows]
            informative = len(rows) if max(values) != min(values) else 0
            self.completions += len(rows)
            self.informative += informative
            b = next(i for i, edge in enumerate(SUCCESS_BINS[1:]) if p <= edge)
            self.bins[b][0] += 1
            self.bins[b][1] += len(rows)
            self.bins[b][2] += informative
            if not solvable[rows[0]]:
                self.impossible[0] += 1
                self.impossible[1] += len(rows)
                self.impossible[2] += informative

    def summary(self) -> dict:
        return {"completions": self.completions, "informative": self.informative, "bins": self.bins,
                "impossible": self.impossible}


def curriculum_groups(trainer):
    """Group rows of a `CurriculumGRPOTrainer` increment (a whole round unless it samples in increments): consecutive
    blocks of its groups' sizes (one process)."""

    def rows(n: int) -> list[list[int]]:
        sizes, start, out = trainer._round.last_increment()[1], 0, []
        for size in sizes:
            out.append(list(range(start, start + size)))
            start += size
        if start != n:
            raise RuntimeError(f"round sizes {sizes} do not cover the {n} rewarded rows")
        return out

    return rows


def warm_model(task: str, seed: int) -> dict:
    """
    The warm-started model, tokenizer and the prompt sets of one (task, seed): the same for every arm. The warm start
    ([`grpo_curriculum.demo.tasks.warm_start`], `WARM_CHUNK` steps at a time) stops once the exact success of level
    `WARM_GATE[0]` at the training temperature reaches `WARM_GATE[1]` (on prompts of its own), so every seed starts
    from a comparable frontier; a fixed step count leaves some seeds where RL cannot start.
    """
    from grpo_curriculum.demo.tasks import build_model, build_tokenizer, warm_start

    _, weights, warm_weights, max_steps = TASKS[task]
    level, gate = WARM_GATE
    tokenizer = build_tokenizer()
    model = build_model(seed=seed)
    warm = level_dataset(task, TRAIN_PROMPTS, seed, warm_weights)
    check = level_dataset(task, 64, CHECK_PROMPT_SEED, tuple(int(k == level) for k in range(1, MAX_LEVEL + 1)))
    check_ids = ([tokenizer(p).input_ids for p in check["prompt"]],
                 [tokenizer(t).input_ids + [tokenizer.eos_token_id] for t in check["target"]])  # fmt: skip
    steps = 0
    while steps < max_steps and statistics.fmean(answer_probability(model, *check_ids, TEMPERATURE)) < gate:
        warm_start(model, tokenizer, warm, steps=WARM_CHUNK, seed=seed * 1000 + steps)
        steps += WARM_CHUNK
    train = level_dataset(task, TRAIN_PROMPTS, seed, weights, IMPOSSIBLE.get(task, 0.0))
    return {"model": model, "tokenizer": tokenizer, "train": train,
            "held_out": level_dataset(task, EVAL_PROMPTS, EVAL_PROMPT_SEED, EVAL_WEIGHTS.get(task, weights)),
            "warm_steps": steps}


def success_histogram(model, warm: dict) -> list[float]:
    """
    The share of the training prompts in each bin of `SUCCESS_BINS` of their exact training success (the probability
    of the exact answer at the training temperature; 0 for an impossible prompt).
    """
    tokenizer, train = warm["tokenizer"], warm["train"]
    p = answer_probability(model, [tokenizer(x).input_ids for x in train["prompt"]],
                           [tokenizer(t).input_ids + [tokenizer.eos_token_id] for t in train["target"]], TEMPERATURE)
    p = [v if ok else 0.0 for v, ok in zip(p, train["solvable"], strict=True)]
    counts = [0] * (len(SUCCESS_BINS) - 1)
    for v in p:
        counts[next(i for i, edge in enumerate(SUCCESS_BINS[1:]) if v <= edge)] += 1
    return [c / len(p) for c in counts]


def evaluator(warm: dict, reward: ExactAnswer):
    """`evaluate(model) -> dict`: the exact reward (mean and per level), the sampled and greedy rewards."""
    tokenizer, held_out = warm["tokenizer"], warm["held_out"]
    prompt_ids = [tokenizer(p).input_ids for p in held_out["prompt"]]
    answer_ids = [reward.answer_ids(t) for t in held_out["target"]]
    levels = held_out["level"]
    targets = list(held_out["target"])
    inputs = tokenizer(list(held_out["prompt"]), return_tensors="pt", padding=True)
    def score(texts, copies):  # 1.0 when a completion's words are exactly its target's
        expanded = [t for t in targets for _ in range(copies)]
        return [float(c.split() == t.split()) for c, t in zip(texts, expanded, strict=True)]

    sampled = HeldOut(tokenizer, inputs, score, MAX_COMPLETION_LENGTH, EVAL_TEMPERATURE, EVAL_SAMPLES, EVAL_SEED)

    def evaluate(model) -> dict:
        p = answer_probability(model, prompt_ids, answer_ids, EVAL_TEMPERATURE)
        greedy, samples = sampled(model)
        by_level = {k: statistics.fmean(v for v, lv in zip(p, levels, strict=True) if lv == k)
                    for k in sorted(set(levels))}  # fmt: skip
        return {"exact": math.fsum(p) / len(p), "levels": by_level, "sampled": math.fsum(samples) / len(samples),
                "greedy": math.fsum(greedy) / len(greedy)}  # fmt: skip

    return evaluate


def budget_callback(evaluate, counter: GenerationCounter, budget: int, points: int):
    """
    Evaluates at step 0 and each time the generated completions pass another `budget / points`; stops training at
    the budget (recording the last point there). `train_time` excludes evaluation.
    """
    from transformers import TrainerCallback

    class BudgetCallback(TrainerCallback):
        def __init__(self):
            self.points, self.train_time, self.eval_time, self._clock, self._next = [], 0.0, 0.0, None, 1

        def _record(self, step, model):
            start = time.perf_counter()
            counter.paused = True
            self.points.append({"step": step, "completions": counter.count, "train_time": self.train_time,
                                **evaluate(model)})  # fmt: skip
            counter.paused = False
            self.eval_time += time.perf_counter() - start

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self._record(0, model)
            self._clock = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            done = counter.count >= budget or state.global_step >= state.max_steps
            if counter.count >= budget * self._next / points or done:
                self.train_time += time.perf_counter() - self._clock
                self._record(state.global_step, model)
                while self._next <= points and counter.count >= budget * self._next / points:
                    self._next += 1
                self._clock = time.perf_counter()
            if done:
                control.should_training_stop = True

    return BudgetCallback()


def answer_probability(model, prompt_ids: list[list[int]], answer_ids: list[list[int]], temperature: float,
                       batch_size: int = 256) -> list[float]:  # fmt: skip
    """
    The exact probability that sampling from `model` at `temperature` (no top-k / top-p truncation) continues each
    prompt with exactly its answer tokens (teacher forcing: the product over the answer's tokens of
    `softmax(logits / temperature)`). Sequences are right-padded, so positions start at 0 as in generation.

    Args:
        model: A causal LM.
        prompt_ids (`list[list[int]]`): Token ids of each prompt.
        answer_ids (`list[list[int]]`): Token ids of each answer (include the end-of-sequence token to require it).
        temperature (`float`): The sampling temperature.
        batch_size (`int`, *optional*, defaults to `256`): Sequences per forward pass.

    Returns:
        `list[float]`: One probability per prompt.
    """
    import torch

    was_training = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(prompt_ids), batch_size):
            prompts, answers = prompt_ids[start : start + batch_size], answer_ids[start : start + batch_size]
            width = max(len(p) + len(a) for p, a in zip(prompts, answers, strict=True))
            ids = torch.zeros((len(prompts), width), dtype=torch.long)
            mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
                ids[row, : len(p) + len(a)] = torch.tensor(p + a)
                mask[row, : len(p) + len(a)] = 1
            logprobs = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float() / temperature, -1)
            for row, (p, a) in enumerate(zip(prompts, answers, strict=True)):
                positions = torch.arange(len(p) - 1, len(p) + len(a) - 1)
                out.append(math.exp(logprobs[row, positions, torch.tensor(a)].sum().item()))
    if was_training:
        model.train()
    return out
