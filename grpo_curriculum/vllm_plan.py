"""
Request plans for a vLLM server with several data-parallel engines.

Pure logic: no torch, no TRL. TRL's server mode sends each unique prompt of a generation round once, with `n=G`
(`num_generations`). vLLM's data-parallel load balancer places whole requests: the `n` completions of one request stay
on one engine. With a fixed generation batch, a larger G means fewer unique prompts, and once they are fewer than the
engines (or not a multiple of them) some engines idle while others sample several groups.

A plan splits each prompt's `n=G` into `k` sub-requests of `n=G/k` (the prompt repeated `k` times in a row). Choices
come back prompt-major, so the `k` sub-requests of a prompt are consecutive and their completions concatenate into the
G completions of its group, in order: rewards, advantages and log-probs line up as if nothing was split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .geometry import divisors


def _check_positive_int(name: str, value, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")


@dataclass(frozen=True)
class RequestPlan:
    """
    How one generation round is sent to a vLLM server: every unique prompt is sent `split` times in a row, each time
    asking for `n_per_request = num_generations / split` completions.

    Args:
        num_prompts (`int`):
            Unique prompts in the round (`generation_batch_size / num_generations`).
        num_generations (`int`):
            Completions per prompt (G).
        num_engines (`int` or `None`):
            Data-parallel engines behind the server, `None` when unknown (treated as one engine).
        split (`int`):
            Sub-requests per prompt (`k`), a divisor of `num_generations`. `1` is TRL's layout.

    Attributes:
        n_per_request (`int`):
            Completions each request asks for, `num_generations / split`.

    Example:
    ```python
    >>> from grpo_curriculum.vllm_plan import plan_requests, trl_layout
    >>> trl_layout(num_prompts=4, num_generations=16, num_engines=8).imbalance
    2.0
    >>> plan = plan_requests(num_prompts=4, num_generations=16, num_engines=8)
    >>> plan.split, plan.n_per_request, plan.imbalance
    (2, 8, 1.0)
    ```
    """

    num_prompts: int
    num_generations: int
    num_engines: int | None
    split: int = 1
    n_per_request: int = field(init=False)

    def __post_init__(self):
        _check_positive_int("num_prompts", self.num_prompts, minimum=0)
        _check_positive_int("num_generations", self.num_generations)
        if self.num_engines is not None:
            _check_positive_int("num_engines", self.num_engines)
        _check_positive_int("split", self.split)
        if self.num_generations % self.split:
            raise ValueError(
                f"`split` ({self.split}) must divide `num_generations` ({self.num_generations}): each sub-request "
                "asks for the same number of completions."
            )
        object.__setattr__(self, "n_per_request", self.num_generations // self.split)

    @property
    def num_requests(self) -> int:
        """Requests sent to the server: `num_prompts x split`."""
        return self.num_prompts * self.split

    @property
    def num_completions(self) -> int:
        """Completions of the round: `num_prompts x num_generations`, whatever the split."""
        return self.num_prompts * self.num_generations

    @property
    def engine_loads(self) -> list[int]:
        """
        Completions each engine samples when the requests are assigned to the engines round-robin, in order (request
        `i` to engine `i % num_engines`). One entry when the engine count is unknown.
        """
        engines = self.num_engines or 1
        loads = [0] * engines
        for request in range(self.num_requests):
            loads[request % engines] += self.n_per_request
        return loads

    @property
    def imbalance(self) -> float:
        """
        Max over mean engine load: `1.0` when every engine samples the same number of completions; the round takes
        about `imbalance` times as long as a perfectly balanced one. `1.0` for an empty round.
        """
        loads = self.engine_loads
        total = sum(loads)
        if total == 0:
            return 1.0
        return max(loads) * len(loads) / total


def trl_layout(num_prompts: int, num_generations: int, num_engines: int | None) -> RequestPlan:
    """
    TRL's own layout: each unique prompt sent once with `n=num_generations` (`split=1`).

    Args:
        num_prompts (`int`):
            Unique prompts in the round.
        num_generations (`int`):
            Completions per prompt (G).
        num_engines (`int` or `None`):
            Data-parallel engines behind the server, `None` when unknown.

    Returns:
        [`RequestPlan`]: The plan with `split=1`.
    """
    return RequestPlan(num_prompts, num_generations, num_engines, split=1)


def plan_requests(num_prompts: int, num_generations: int, num_engines: int | None) -> RequestPlan:
    """
    Choose how many sub-requests to split each prompt into so that the server's engines share a round evenly.

    - `num_engines` `None` (unknown) or `1`: `split=1`, exactly TRL's layout.
    - Otherwise the smallest divisor `k` of `num_generations` such that `num_prompts x k` is a multiple of
      `num_engines` (every engine then gets the same number of requests of the same size: `imbalance == 1.0`).
    - If there is none (e.g. 6 completions on 4 engines), the `k` with the smallest [`RequestPlan.imbalance`], the
      smaller `k` on ties. `k = num_generations` (requests of one completion) is always a candidate, so the result is
      never worse than the best any layout can do: `ceil(C / E) / (C / E)` for `C` completions on `E` engines.

    Args:
        num_prompts (`int`):
            Unique prompts in the round (`len(prompts)` of the server call).
        num_generations (`int`):
            Completions per prompt (G, the `n` TRL asks for).
        num_engines (`int` or `None`):
            Data-parallel engines behind the server (`data_parallel_size`), `None` when unknown.

    Returns:
        [`RequestPlan`]: The plan.

    Raises:
        `ValueError`: If an argument is not a positive integer (`num_prompts` may be 0).

    Example:
    ```python
    >>> from grpo_curriculum.vllm_plan import plan_requests
    >>> plan_requests(num_prompts=1, num_generations=8, num_engines=4).split  # one group over 4 engines
    4
    >>> plan_requests(num_prompts=8, num_generations=4, num_engines=4).split  # already balanced: TRL's layout
    1
    ```
    """
    if num_engines is None or num_engines == 1:
        return RequestPlan(num_prompts, num_generations, num_engines, split=1)
    candidates = [RequestPlan(num_prompts, num_generations, num_engines, split=k) for k in divisors(num_generations)]
    for plan in candidates:
        if plan.num_requests % num_engines == 0:
            return plan
    best = candidates[0]
    for plan in candidates[1:]:
        if plan.imbalance < best.imbalance - 1e-12:
            best = plan
    return best
