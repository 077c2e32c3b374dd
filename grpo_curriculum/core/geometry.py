"""Batch geometry of a GRPO run: which `num_generations` values TRL accepts, and how to fix one it rejects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import gcd

from .errors import MISSING, CurriculumError, Problem, list_text, plural, raise_if_any
from .rules import COUNT, MAX_COUNT, NUM_GENERATIONS, check, is_int


def divisors(n: int) -> list[int]:
    """
    Args:
        n (`int`): A positive integer.

    Returns:
        `list[int]`: All positive divisors of `n`, ascending (empty when `n < 1`).
    """
    small = [i for i in range(1, int(n**0.5) + 1) if n % i == 0] if n >= 1 else []
    return small + [n // i for i in reversed(small) if i * i != n]


def sums(candidates, total: int) -> int:
    """
    Which numbers up to `total` are sums of candidates, each usable any number of times, as a bit mask (bit r set: r is
    such a sum; 0 is, as the empty sum).

    Args:
        candidates (`Iterable[int]`): Positive integers.
        total (`int`): A nonnegative integer.
    """
    reachable, below = 1, (1 << (total + 1)) - 1
    for c in sorted(set(candidates)):
        step = c
        while step <= total:  # shifting by c, 2c, 4c, ... adds every multiple of c up to total
            reachable = (reachable | reachable << step) & below
            step *= 2
    return reachable


def fills(candidates, total: int) -> bool:
    """Whether `total` is a sum of candidates (e.g. 12 = 5 + 7, but not with 5 and 8); see [`sums`]."""
    return bool(sums(candidates, total) >> total & 1)


def _positive(values: dict[str, object], optional: bool = False) -> list[Problem]:
    return check({k: COUNT for k in values}, {k: v for k, v in values.items() if not (optional and v is None)})


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _nearest(valid: list[int], target: int) -> tuple[int, ...]:
    best = min((abs(v - target) for v in valid), default=None)
    return tuple(v for v in valid if abs(v - target) == best)


@dataclass(frozen=True)
class Fixes:
    """
    Ways to make a rejected `num_generations` valid: change G, or grow one dimension of the batch geometry.

    Args:
        nearest_num_generations (`tuple[int, ...]`):
            The valid G closest to the asked one (both neighbours when tied, ascending; empty when none is valid).
        per_device_train_batch_size (`int` or `None`):
            Smallest per-device batch >= the current one making the asked G valid (`None` when G < 2).
        steps_per_generation (`int` or `None`):
            Smallest steps per generation >= the current one making the asked G valid (`None` when G < 2).
        num_processes (`int` or `None`):
            Smallest number of processes >= the current one making the asked G valid (`None` when G < 2).
    """

    nearest_num_generations: tuple[int, ...]
    per_device_train_batch_size: int | None
    steps_per_generation: int | None
    num_processes: int | None

    def lines(self, geometry: BatchGeometry) -> list[str]:
        """
        Args:
            geometry ([`BatchGeometry`]): The geometry these fixes were computed for.

        Returns:
            `list[str]`: e.g. `["use num_generations 6 (nearest valid)", "or per_device_train_batch_size 4 ->
            generation batch 8"]`.
        """
        n, b, s = geometry.num_processes, geometry.per_device_train_batch_size, geometry.steps_per_generation
        lines = [f"use num_generations {list_text(self.nearest_num_generations, ' or ')} (nearest valid)"]
        lines = lines if self.nearest_num_generations else []
        if self.per_device_train_batch_size not in (None, b):
            lines.append(f"per_device_train_batch_size {self.per_device_train_batch_size} -> generation batch "
                         f"{n * self.per_device_train_batch_size * s}")
        if self.steps_per_generation not in (None, s):
            name = f"steps_per_generation {self.steps_per_generation}"
            if geometry.gradient_accumulation_steps in (None, s):
                name = f"gradient_accumulation_steps {self.steps_per_generation} (steps_per_generation follows it)"
            lines.append(f"{name} -> generation batch {n * b * self.steps_per_generation}")
        if self.num_processes not in (None, n):
            lines.append(f"num_processes {self.num_processes} -> generation batch {self.num_processes * b * s}")
        return [line if line.startswith("use ") else ("or " if i else "use ") + line for i, line in enumerate(lines)]


@dataclass(frozen=True)
class BatchGeometry:
    """
    How many completions one GRPO generation round holds, as TRL 1.16's `GRPOConfig` derives it: `generation_batch_size
    = num_processes x per_device_train_batch_size x steps_per_generation`, which `num_generations` must divide.

    Args:
        num_processes (`int`): Number of training processes (`args.world_size`).
        per_device_train_batch_size (`int`): Completions per process per micro-step.
        steps_per_generation (`int`): Micro-steps served by one generation round.
        gradient_accumulation_steps (`int`, *optional*): Informational; `None` means `steps_per_generation`.
        per_device_eval_batch_size (`int`, *optional*): Per-device eval batch, checked with `num_generations_eval`.
        num_generations_eval (`int`, *optional*):
            The fixed eval G; `None` means evaluation does not run and its rule is not checked.
    """

    num_processes: int
    per_device_train_batch_size: int
    steps_per_generation: int
    gradient_accumulation_steps: int | None = None
    per_device_eval_batch_size: int | None = None
    num_generations_eval: int | None = None

    def __post_init__(self):
        names = ("num_processes", "per_device_train_batch_size", "steps_per_generation")
        optional = ("gradient_accumulation_steps", "per_device_eval_batch_size", "num_generations_eval")
        problems = _positive({k: getattr(self, k) for k in names})
        raise_if_any(problems + _positive({k: getattr(self, k) for k in optional}, True), "batch geometry")
        for name in names + optional:  # plain Python integers (`numpy.int64(4)` is an integer too)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))
        n, e = self.num_processes, self.per_device_eval_batch_size
        batches = {"generation_batch_size": (self.generation_batch_size, self.describe()),
                   "per_device_eval_batch_size": (e and e * n, f"{e} per-device eval batch x {plural(n, 'process')}")}
        raise_if_any([Problem(key, size, f"makes a batch of {size} completions ({how}), more than the {MAX_COUNT} "
                              "the curriculum checks (a bound on the input)", "use a smaller batch")
                      for key, (size, how) in batches.items() if size and size > MAX_COUNT], "batch geometry")

    @property
    def generation_batch_size(self) -> int:
        """`int`: `num_processes x per_device_train_batch_size x steps_per_generation`."""
        return self.num_processes * self.per_device_train_batch_size * self.steps_per_generation

    @classmethod
    def from_values(
        cls, *, num_processes, per_device_train_batch_size, gradient_accumulation_steps=1, steps_per_generation=None,
        generation_batch_size=None, per_device_eval_batch_size=None, num_generations_eval=None,
    ) -> BatchGeometry:
        """
        Build a geometry with TRL 1.16's rules: `steps_per_generation` defaults to `gradient_accumulation_steps`, or is
        `generation_batch_size // (per_device_train_batch_size x num_processes)` when that is given.

        Args:
            num_processes, per_device_train_batch_size, gradient_accumulation_steps (`int`):
                As in `GRPOConfig` (`num_processes` is its `world_size`).
            steps_per_generation, generation_batch_size (`int`, *optional*):
                At most one of the two.
            per_device_eval_batch_size, num_generations_eval (`int`, *optional*):
                Eval batch and eval G; leave `num_generations_eval` unset when evaluation does not run.

        Returns:
            [`BatchGeometry`]: The derived geometry. Raises [`CurriculumError`] listing every invalid value.
        """
        values = dict(num_processes=num_processes, per_device_train_batch_size=per_device_train_batch_size,
                      gradient_accumulation_steps=gradient_accumulation_steps)
        optional = dict(steps_per_generation=steps_per_generation, generation_batch_size=generation_batch_size,
                        per_device_eval_batch_size=per_device_eval_batch_size,
                        num_generations_eval=num_generations_eval)
        problems = _positive(values) + _positive(optional, True)
        if steps_per_generation is not None and generation_batch_size is not None:
            problems.append(Problem("generation_batch_size", generation_batch_size,
                                    "must not be set together with steps_per_generation",
                                    "set only one of generation_batch_size and steps_per_generation"))
        raise_if_any(problems, "batch geometry")
        if generation_batch_size is not None:
            step = per_device_train_batch_size * num_processes
            if generation_batch_size % step:
                low, high = generation_batch_size // step * step, _round_up(generation_batch_size, step)
                raise CurriculumError([Problem(
                    "generation_batch_size", generation_batch_size, f"must be a multiple of the global batch "
                    f"({plural(num_processes, 'process')} x {per_device_train_batch_size} per-device batch = {step})",
                    f"use generation_batch_size {f'{low} or ' if low else ''}{high}")], "batch geometry")
            steps_per_generation = generation_batch_size // step
        elif steps_per_generation is None:
            steps_per_generation = gradient_accumulation_steps
        return cls(num_processes, per_device_train_batch_size, steps_per_generation, gradient_accumulation_steps,
                   per_device_eval_batch_size, num_generations_eval)

    @classmethod
    def from_args(cls, args, num_processes: int | None = None) -> BatchGeometry:
        """
        Read the geometry from a `GRPOConfig`-like object (duck-typed).

        Args:
            args (`GRPOConfig` or similar):
                Read: `world_size`, `per_device_train_batch_size`, `gradient_accumulation_steps`,
                `steps_per_generation`, `generation_batch_size`, `num_generations`, and the eval fields `do_eval`,
                `eval_strategy`, `per_device_eval_batch_size`, `num_generations_eval`.
            num_processes (`int`, *optional*):
                Overrides `args.world_size`. A constructed config's `generation_batch_size` was derived for its own
                world size, so `steps_per_generation` is kept and the generation batch recomputed.

        Returns:
            [`BatchGeometry`]: The geometry; the eval fields are set only when evaluation runs.
        """
        own = getattr(args, "world_size", None)
        b, spg, gbs = args.per_device_train_batch_size, args.steps_per_generation, args.generation_batch_size
        if spg is not None and gbs is not None and all(map(is_int, (own, b, spg))) and gbs == b * own * spg:
            gbs = None  # both filled in by GRPOConfig.__post_init__ for its own world size
        strategy = getattr(args, "eval_strategy", "no")
        eval_g = eval_b = None
        if getattr(args, "do_eval", False) and getattr(strategy, "value", strategy) != "no":
            eval_g = getattr(args, "num_generations_eval", None) or args.num_generations
            eval_b = args.per_device_eval_batch_size
        return cls.from_values(
            num_processes=own if num_processes is None else num_processes, per_device_train_batch_size=b,
            gradient_accumulation_steps=args.gradient_accumulation_steps, steps_per_generation=spg,
            generation_batch_size=gbs, per_device_eval_batch_size=eval_b, num_generations_eval=eval_g)

    def describe(self) -> str:
        """`str`: e.g. `"2 processes x 3 per-device batch x 1 steps per generation = generation batch 6"`."""
        return (f"{plural(self.num_processes, 'process')} x {self.per_device_train_batch_size} per-device batch x "
                f"{self.steps_per_generation} steps per generation = generation batch {self.generation_batch_size}")

    def valid_num_generations(self) -> list[int]:
        """`list[int]`: Every G TRL accepts here: the divisors >= 2 of the generation batch, ascending."""
        return [d for d in divisors(self.generation_batch_size) if d >= 2]

    def is_valid(self, num_generations: int) -> bool:
        """`bool`: Whether TRL accepts `num_generations` here (an integer >= 2 dividing the generation batch)."""
        return not NUM_GENERATIONS.broken(num_generations) and self.generation_batch_size % num_generations == 0

    def fixes(self, num_generations: int) -> Fixes:
        """
        Args:
            num_generations (`int`): The asked G.

        Returns:
            [`Fixes`]: The nearest valid G, and the smallest per-device batch, steps per generation or process count
            (each >= its current value) that makes the asked G valid.
        """
        G, n, b, s = num_generations, self.num_processes, self.per_device_train_batch_size, self.steps_per_generation
        nearest = _nearest(self.valid_num_generations(), G)
        if G < 2:
            return Fixes(nearest, None, None, None)
        return Fixes(nearest, _round_up(b, G // gcd(G, n * s)), _round_up(s, G // gcd(G, n * b)),
                     _round_up(n, G // gcd(G, b * s)))

    def problems(self, num_generations: int, key: str = "num_generations") -> list[Problem]:
        """
        Args:
            num_generations (`int`): The G to check.
            key (`str`, *optional*, defaults to `"num_generations"`): Where the value lives, for the [`Problem`].

        Returns:
            `list[Problem]`: Empty when TRL accepts G; otherwise one problem naming the geometry, every valid G and the
            fixes.
        """
        if self.is_valid(num_generations):
            return []
        valid = self.valid_num_generations()
        listed = list_text(valid) or "none (a generation batch of 1 has no divisor >= 2)"
        broken = NUM_GENERATIONS.broken(num_generations)
        if broken:
            rule = f"{broken}; valid here ({self.describe()}): {listed}"
            fix = f"use num_generations {valid[0] if valid else '2 and per_device_train_batch_size 2'}"
            return [Problem(key, num_generations, rule, fix)]
        rule = f"must divide the generation batch ({self.describe()}); valid num_generations: {listed}"
        return [Problem(key, num_generations, rule, "; ".join(self.fixes(num_generations).lines(self)))]

    def per_prompt_problems(self, candidates, key: str = "num_generations") -> list[Problem]:
        """
        Check the candidates of a per-prompt stage: the divisibility rule does not bind (each prompt gets its own G),
        but every candidate must fit in the generation batch and some combination of them must fill it exactly.

        Args:
            candidates (`Sequence[int]`): The candidate G values.
            key (`str`, *optional*, defaults to `"num_generations"`): Where the candidates live.

        Returns:
            `list[Problem]`: Empty when a round can be allocated.
        """
        batch = self.generation_batch_size
        too_large = [g for g in candidates if g > batch]
        if too_large:
            return [Problem(key, list(candidates), f"holds [{list_text(too_large)}], larger than the generation batch "
                            f"({self.describe()}): such a group never fits in a round",
                            f"drop them, or grow the generation batch to at least {max(too_large)}")]
        if not fills(candidates, batch):
            return [Problem(key, list(candidates), f"cannot fill the generation batch ({self.describe()}): no sum of "
                            "the candidates makes it, and a round holds exactly that many completions",
                            f"add a candidate that divides {batch} (valid: "
                            f"{list_text(self.valid_num_generations())})")]
        return []

    def top_up_problems(self, top_up, key: str = "adaptive") -> list[Problem]:
        """
        Check that a top-up round ([`grpo_curriculum.core.sampling.TopUp`]) can hold exactly the generation batch: the
        batch is a multiple of the pilot (every increment adds pilots), the pilots of the round's prompts fit in it,
        the groups at their largest size can take all of it, and the pilot is a multiple of the number of processes
        (an increment adds a pilot to any number of groups, and each increment's completions are split evenly over
        the processes, as TRL splits a generation batch).

        Args:
            top_up ([`TopUp`]): The stage's plan.
            key (`str`, *optional*, defaults to `"adaptive"`): Where the stage's `adaptive` settings live.

        Returns:
            `list[Problem]`: Empty when every top-up round can be filled.
        """
        batch, n, pilot, largest = self.generation_batch_size, self.num_processes, top_up.pilot, top_up.largest
        where = f"the generation batch ({self.describe()})"
        if batch % pilot:
            # A divisor of the pilot divides every candidate; it must divide the batch and split over the processes.
            fits = [d for d in divisors(gcd(batch, pilot)) if d >= 2 and d % n == 0]
            others = [d for d in divisors(batch) if d >= 2 and d % n == 0]
            fix = (f"use `pilot: {fits[-1]}`" if fits else f"use candidates that are multiples of a pilot dividing "
                   f"{batch} and splitting over the {plural(n, 'process')} (e.g. {others[0]})" if others else
                   f"use a generation batch that is a multiple of {pilot * n // gcd(pilot, n)}")
            return [Problem(f"{key}.pilot", pilot, f"must divide {where}: a top-up round grows by pilots and holds "
                            f"exactly the generation batch", fix)]
        prompts, given = top_up.prompts_for(batch), top_up.prompts is not None
        count = f"{prompts} prompt{'s' if prompts != 1 else ''}"
        value, what = (prompts, "") if given else (MISSING, f"(not given: the default rule makes {prompts}) ")
        if prompts * pilot > batch:
            return [Problem(f"{key}.prompts", value, f"{what}must be at most {batch // pilot}: {count} x "
                            f"pilot {pilot} = {prompts * pilot} completions in pilots exceed {where}",
                            f"use `prompts: {batch // pilot}` or fewer")]
        if prompts * largest < batch:
            least = -(-batch // largest)
            return [Problem(f"{key}.prompts", value, f"{what}must be at least {least}: {count} x largest "
                            f"{largest} = {prompts * largest} completions cannot fill {where}",
                            f"use `prompts: {least}` or more, or a larger largest candidate")]
        if pilot % n:
            fits = [d for d in divisors(pilot) if d > 1 and d < n] if n > 1 else []
            wider = pilot * n // gcd(pilot, n)
            fix = [f"use `pilot: {wider}` (if it divides every candidate)"] if batch % wider == largest % wider == 0 \
                else []
            fix += [f"run on {list_text(fits, ' or ')} processes"] if fits else []
            return [Problem(f"{key}.pilot", pilot, f"must be a multiple of the {plural(n, 'process')}: every increment "
                            "adds a pilot to some of the groups, and its completions must split evenly over the processes",
                            "; or ".join(fix) or f"use a pilot that is a multiple of {n}")]
        if largest > batch:  # as `per_prompt_problems` refuses the same candidates
            return [Problem(f"{key}.num_generations", MISSING, f"holds {largest}, larger than {where}: such a group "
                            "never fits in a round", f"drop the candidates above {batch}, or grow the generation batch "
                            f"to at least {largest}")]
        return []

    def eval_problems(self, key: str = "num_generations_eval") -> list[Problem]:
        """
        Check TRL's eval rule: `per_device_eval_batch_size x num_processes` divisible by `num_generations_eval`.

        Args:
            key (`str`, *optional*, defaults to `"num_generations_eval"`): Where the eval G lives.

        Returns:
            `list[Problem]`: Empty when valid or not checked (`num_generations_eval` or the eval batch is `None`).
        """
        G, e, n = self.num_generations_eval, self.per_device_eval_batch_size, self.num_processes
        if G is None or e is None or (e * n) % G == 0:
            return []
        valid = [d for d in divisors(e * n) if d >= 2]
        e2 = _round_up(e, G // gcd(G, n))
        fix = (f"use num_generations_eval {list_text(_nearest(valid, G), ' or ')}, or " if valid else "use ")
        return [Problem(key, G, f"must divide the global eval batch ({e} per-device eval batch x "
                        f"{plural(n, 'process')} = {e * n}); valid values: {list_text(valid) or 'none'}",
                        fix + f"per_device_eval_batch_size {e2} -> global eval batch {e2 * n}")]

    def per_step_note(self, num_generations: int) -> str | None:
        """
        The seed documents' stricter rule: every micro-step (`num_processes x per_device_train_batch_size`) holds whole
        groups. TRL 1.16 does not require it: groups may span processes and micro-steps.

        Args:
            num_generations (`int`): The G to check.

        Returns:
            `str` or `None`: `None` when the rule holds (or G is not a positive integer), else a one-line note.
        """
        G, n, b = num_generations, self.num_processes, self.per_device_train_batch_size
        if not is_int(G) or G < 1 or (n * b) % G == 0:
            return None
        return (f"note: {n} x {b} = {n * b} completions per micro-step is not a multiple of num_generations {G}, so "
                "groups span processes or micro-steps (TRL allows this; the stricter per-step rule does not)")


def split_batches_problem(key: str, value) -> Problem:
    """The problem of an `accelerator_config` (named `key`) whose `split_batches` is `value` (on)."""
    return Problem(f"{key}.split_batches", value, "is not supported: GRPO's grouping assumes accelerate's default "
                   "sharding, where each process draws its own per-device batch (with `split_batches` every process "
                   "gets a slice of one batch, and groups of G completions are cut)",
                   "remove `split_batches` (or set it to false)")


def generation_kwargs_problems(value, key: str = "generation_kwargs") -> list[Problem]:
    """A `temperature` in `generation_kwargs` (TRL applies them last) would pin every round's temperature."""
    if not isinstance(value, Mapping) or "temperature" not in value:
        return []
    return [Problem(f"{key}.temperature", value["temperature"], "would override the curriculum's temperature in every "
                    "round (TRL applies `generation_kwargs` last)",
                    "remove `temperature` from `generation_kwargs`; set it per stage instead")]
