"""The closing lines of `train` and `demo`: the switches, the per-stage table and the time per step."""

from __future__ import annotations

import os

from ..core.errors import plural
from ..core.geometry import BatchGeometry


def stage_summary(log_history: list[dict], generation_batch_size: int, stages: list | None = None,
                  steps_per_round: float = 1.0) -> list[dict]:
    """
    Per-stage rows from a run's `log_history`.

    Args:
        log_history (`list[dict]`):
            The Trainer's `state.log_history` (a training step's lines: with a reward, or a loss for a step
            that trains a round generated at an earlier step; switch records and the closing line are skipped).
        generation_batch_size (`int`):
            Completions per generation round, for completions per second.
        stages (`list[Stage]`, *optional*):
            The curriculum's stages: their names label the rows, and a per-prompt stage's G reads "per prompt".
        steps_per_round (`float`, *optional*, defaults to `1.0`):
            Optimizer steps one generation round trains (`steps_per_generation x num_iterations /
            gradient_accumulation_steps`): a step's share of a round's completions.

    Returns:
        `list[dict]`: One row a stage: optimizer steps (each log line counts the steps since the one before it, so
        `logging_steps` 5 counts 5 a line), G (each value logged; a per-prompt stage: the range of the prompts' G and
        their mean, see [`per_prompt_g`]), the temperature range, mean reward, mean zero-std fraction and completions
        generated per second: `curriculum/generated` where a stage samples in increments (top-up, dynamic sampling:
        its extra rounds included), else a round's completions per step, over TRL's `step_time` (a line's mean step
        time, times its steps).
    """
    rows: dict[int, dict] = {}
    previous = 0
    for entry in log_history:
        if "curriculum/stage" not in entry or "reward" not in entry and "loss" not in entry:
            continue  # not a training step's line (a line without a reward: a step of a round generated before)
        step = int(entry.get("step", previous + 1))
        steps, previous = max(step - previous, 1), step
        row = rows.setdefault(
            int(entry["curriculum/stage"]),
            {"steps": 0, "G": [], "T": [], "reward": [], "zero_std": [], "time": 0.0, "generated": 0.0, "entries": []},
        )
        row["entries"].append(entry)
        row["steps"] += steps
        if entry.get("curriculum/num_generations") is not None:
            row["G"].append(entry["curriculum/num_generations"])
        row["T"].append(entry["curriculum/temperature"])
        if entry.get("reward") is not None:
            row["reward"].append(entry["reward"])
        if entry.get("frac_reward_zero_std") is not None:
            row["zero_std"].append(entry["frac_reward_zero_std"])
        row["time"] += (entry.get("step_time") or 0.0) * steps
        generated = entry.get("curriculum/generated")
        row["generated"] += generated if generated is not None else steps * generation_batch_size / steps_per_round
    summary = []
    for index, row in sorted(rows.items()):
        stage = stages[index] if stages is not None and index < len(stages) else None
        mean = lambda values: sum(values) / len(values) if values else float("nan")  # noqa: E731
        counts = per_prompt_g(row["entries"])
        if counts:
            prompts = sum(counts.values())
            g = f"{min(counts)}-{max(counts)} per prompt (mean {sum(k * n for k, n in counts.items()) / prompts:.2f})"
        elif stage is not None and stage.adaptive is not None and stage.adaptive.per_prompt:
            g = f"per prompt (mean {mean(row['G']):.2f})"
        else:
            g = "/".join(f"{value:g}" for value in sorted(set(row["G"])))
        low, high = min(row["T"]), max(row["T"])
        summary.append(
            {
                "stage": f"{index} {stage.name}" if stage is not None and stage.name else index,
                "steps": row["steps"],
                "G": g,
                "T": f"{low:.2f}" if low == high else f"{low:.2f}-{high:.2f}",
                "mean reward": mean(row["reward"]),
                "zero-std frac": mean(row["zero_std"]),
                "completions/s": row["generated"] / row["time"] if row["time"] else float("nan"),
            }
        )
    return summary


def format_table(rows: list[dict]) -> str:
    """A Markdown table of `rows` (dicts with the same keys), floats to 3 decimals, columns right-aligned."""
    if not rows:
        return "(no training steps logged)"
    headers = list(rows[0])
    cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda values: "| " + " | ".join(v.rjust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)])


def per_prompt_g(log_history: list[dict]) -> dict[int, int]:
    """Prompts trained at each G in the per-prompt rounds of `log_history` (its `curriculum/prompts_at_g{G}`)."""
    counts: dict[int, int] = {}
    prefix = "curriculum/prompts_at_g"
    for entry in log_history:
        for key, value in entry.items():
            if key.startswith(prefix):
                g = int(key[len(prefix) :])
                counts[g] = counts.get(g, 0) + int(value)
    return dict(sorted(counts.items()))


def describe_per_prompt_g(counts: dict[int, int]) -> str:
    """`"G per prompt over 40 prompts: 2 for 10 (25%), 4 for 30 (75%); mean 3.50"`."""
    total = sum(counts.values())
    shares = ", ".join(f"{g} for {n} ({100 * n / total:.0f}%)" for g, n in counts.items())
    return f"G per prompt over {total} prompts: {shares}; mean {sum(g * n for g, n in counts.items()) / total:.2f}"


def switch_summary(switches: list[dict], run_dir: str, log_history: list[dict] = ()) -> str:
    """
    The demo's closing lines about the switches: how many, where they are saved, and how steps are numbered; then,
    when some rounds gave each prompt its own G, the distribution of G over the prompts trained (from `log_history`).
    """
    from ..training.switches import SWITCHES_FILE, is_stage_change_only

    counts = per_prompt_g(log_history)
    per_prompt = f"\n{describe_per_prompt_g(counts)}" if counts else ""
    if not switches:
        if counts:
            return f"no switch of stage or temperature: the curriculum chose G per prompt{per_prompt}"
        return "no switch: the curriculum kept one setting"
    stage_only = sum(map(is_stage_change_only, switches))
    counts = plural(len(switches) - stage_only, "switch")
    if stage_only:
        counts += " and " + plural(stage_only, "stage change")
    reasons = "its reason" if len(switches) == 1 else "their reasons"
    return (
        f"{counts}, printed above and saved with {reasons} in {os.path.join(run_dir, SWITCHES_FILE)} and "
        "trainer_state.json.\n"
        "(A switch at step n: step n, numbered as in the log lines and the plot, is the first trained at the new "
        "setting.)" + per_prompt
    )


ASYNC_TRAINER = "CurriculumAsyncGRPOTrainer"


def async_summary(log_history: list[dict]) -> str:
    """
    The closing line of an asynchronous run: the G of the samples trained on (each step logs their mean, each sample
    recording its group's G) at the first and last logged step, the mean reward, and the groups dynamic sampling
    dropped in the worker (`rollout/dropped_groups_total`, summed over the logging windows).
    """
    steps = [entry for entry in log_history if "loss" in entry and "curriculum/num_generations" in entry]
    if not steps:
        return "no step logged the G of its samples"
    first, last = steps[0]["curriculum/num_generations"], steps[-1]["curriculum/num_generations"]
    rewards = [entry["reward"] for entry in steps if isinstance(entry.get("reward"), (int, float))]
    text = f"G of the samples trained on: {first:g} at step {steps[0]['step']}, {last:g} at step {steps[-1]['step']}"
    text += f"; mean reward {sum(rewards) / len(rewards):.3f}" if rewards else ""
    dropped = sum(entry.get("rollout/dropped_groups_total", 0) for entry in log_history)
    return text + (f"; {dropped:g} zero-variance groups dropped before the queue" if dropped else "")


def print_start(recipe_path: str, trainer, why: str) -> None:
    import torch

    from ..training.engines import engine

    name = type(trainer).__name__
    print(f"recipe: {recipe_path}" + (f" (trainer: {name})" if name != "CurriculumGRPOTrainer" else ""))
    args = trainer.args
    if name == ASYNC_TRAINER:  # no generation batch: the rollout worker samples group by group from the server
        from ..core.asynchronous import step_size

        per_step = step_size(args.per_device_train_batch_size, args.gradient_accumulation_steps,
                             trainer.accelerator.num_processes, args.token_budget)
        print(f"asynchronous: from the rollout queue {per_step} (at most {args.max_staleness} policy versions old), "
              f"generated by the vLLM server at {args.vllm_server_base_url}")
    else:
        print(f"geometry: {BatchGeometry.from_args(args).describe()}")
    print(f"engine: {engine(trainer)}")
    print(f"torch threads: {torch.get_num_threads()} ({why})", flush=True)


def print_end(trainer, recipe, elapsed: float, run_dir: str, resumed: bool = False) -> None:
    """The closing lines of `train` and `demo`: time per step, the switches and the per-stage table."""
    steps = trainer.state.global_step
    per_step = f" ({1000 * elapsed / steps:.0f} ms a step)" if steps and not resumed else ""
    print(f"\ntrained to step {steps} in {elapsed:.1f} s{per_step}")
    if type(trainer).__name__ == ASYNC_TRAINER:
        print(async_summary(trainer.state.log_history))
        return
    print(switch_summary(trainer._curriculum.switches, run_dir, trainer.state.log_history))
    print()
    args = trainer.args
    steps_per_round = args.steps_per_generation * trainer.num_iterations / args.gradient_accumulation_steps
    print(format_table(stage_summary(trainer.state.log_history, args.generation_batch_size, recipe.curriculum.stages,
                                     steps_per_round=steps_per_round)))

