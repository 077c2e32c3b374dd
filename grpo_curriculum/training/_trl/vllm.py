"""
The seam's vLLM server requests: a round of mixed group sizes (per-prompt G) sent as TRL sends a round of one G, one
request per distinct size with `n` = that size ([`install_variable_group_requests`]). Knows `VLLMGeneration` and
`VLLMClient` internals, like the rest of the seam.
"""

from __future__ import annotations

import functools

from .settings import unsupported_trl


def install_variable_group_requests(trainer) -> None:
    """
    In vLLM server mode (main process), make the first turn of a round of mixed group sizes send TRL's kind of
    requests: each unique prompt once with `n` = its group's size. TRL sends such a round row by row
    (`num_generations = 1`, `n=1`); the wrapper around `VLLMClient.generate` sends one request per distinct size
    instead (`n` = that size, its prompts in round order), and hands the completions back row by row, in group order.
    With a fixed sampling seed, vLLM then gives each completion of a group its own seed (`seed + index`), as in TRL;
    rows sent with `n=1` would all repeat it.

    Only the call [`GRPOHooks`] marks as an increment's first turn (`trainer._round.requesting`) is regrouped. Every
    other call passes through unchanged: a round of one G, evaluation, a `rollout_func`'s own calls, and the later
    turns of TRL's tool loop, where each row continues its own history (one prompt a row, `n=1`).
    """
    if not getattr(trainer, "use_vllm", False) or not trainer.accelerator.is_main_process:
        return
    generation = getattr(trainer, "vllm_generation", None)
    client = getattr(generation, "vllm_client", None) if getattr(generation, "mode", None) == "server" else None
    if client is None:
        return
    original = client.generate

    @functools.wraps(original)
    def generate(prompts, features=None, n=1, **kwargs):
        sizes = None if trainer._round is None else trainer._round.requesting
        if sizes is None:
            return original(prompts=prompts, features=features, n=n, **kwargs)
        if n != 1 or len(prompts) != sum(sizes):
            raise unsupported_trl(f"regroup a round's first vLLM request ({len(prompts)} prompts, n={n}, {sizes=})")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        rows: list = [None] * len(sizes)  # per group: (prompt_ids, completions, logprobs, logprob_token_ids)
        for size in sorted(set(sizes)):
            groups = [i for i, s in enumerate(sizes) if s == size]
            output = original(prompts=[prompts[starts[i]] for i in groups],
                              features=None if features is None else [features[starts[i]] for i in groups],
                              n=size, **kwargs)  # fmt: skip
            for j, i in enumerate(groups):
                part = slice(j * size, (j + 1) * size)
                rows[i] = (output["prompt_ids"][j], output["completion_ids"][part],
                           None if output.get("logprobs") is None else output["logprobs"][part],
                           None if output.get("logprob_token_ids") is None else output["logprob_token_ids"][part])
        result = {"prompt_ids": [row[0] for row, size in zip(rows, sizes) for _ in range(size)],
                  "completion_ids": [c for row in rows for c in row[1]]}  # fmt: skip
        for k, name in ((2, "logprobs"), (3, "logprob_token_ids")):
            result[name] = None if rows[0][k] is None else [value for row in rows for value in row[k]]
        return result

    client.generate = generate
