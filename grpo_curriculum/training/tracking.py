"""
Experiment tracking: the curriculum in the wandb run config, each switch in a wandb table.

The `curriculum/*` metrics reach wandb (and every other `report_to` backend) through the Trainer's log lines; this
module adds what a log line cannot carry. It is a no-op unless `report_to` includes `"wandb"` and a wandb run is
active on this process (the Trainer's `WandbCallback` starts it before our `on_train_begin`).
"""

from __future__ import annotations

from dataclasses import asdict

SWITCH_COLUMNS = ["step", "round", "stage_from", "stage_to", "G_from", "G_to", "T_from", "T_to", "reason"]


def _wandb_run(args):
    report_to = args.report_to if isinstance(args.report_to, (list, tuple)) else [args.report_to]
    if "wandb" not in report_to and "all" not in report_to:
        return None
    try:
        import wandb
    except ImportError:
        return None
    return wandb if wandb.run is not None else None


def curriculum_config(callback) -> dict:
    """
    The curriculum as a JSON-serialisable mapping: the stages, each with `steps`, its first and last optimizer steps
    (numbered from 1, as in the log lines and the switch records).
    """
    stages = []
    for i, stage in enumerate(callback.schedule.stages):
        entry = {k: v for k, v in asdict(stage).items() if v is not None}
        if callback.resolved is not None:
            entry["steps"] = list(callback.resolved.step_range(i))
        stages.append(entry)
    return {"stages": stages}


def log_config(args, callback) -> None:
    """Put the curriculum into the wandb run config under `curriculum`."""
    wandb = _wandb_run(args)
    if wandb is not None:
        wandb.config.update({"curriculum": curriculum_config(callback)}, allow_val_change=True)


def switch_rows(switches: list[dict]) -> list[list]:
    return [
        [s["step"], s["round"], s["from"]["stage"], s["to"]["stage"], s["from"]["num_generations"],
         s["to"]["num_generations"], s["from"]["temperature"], s["to"]["temperature"], s["reason"]]
        for s in switches
    ]  # fmt: skip


def log_switches(args, switches: list[dict], step: int, commit: bool = False) -> None:
    """Log the table of every switch so far as `curriculum/switches` (wandb tables are immutable: a new one each time)."""
    wandb = _wandb_run(args)
    if wandb is None:
        return
    table = wandb.Table(columns=SWITCH_COLUMNS, data=switch_rows(switches))
    wandb.log({"curriculum/switches": table, "train/global_step": step}, commit=commit)


def log_histogram(args, key: str, values: list, step: int) -> None:
    """Log `values` as a wandb histogram under `key` (e.g. each prompt's G in the rounds since the last log line)."""
    wandb = _wandb_run(args)
    if wandb is not None:
        wandb.log({key: wandb.Histogram(values), "train/global_step": step}, commit=False)
