"""
Read back what wandb wrote to an offline run's `.wandb` file (a LevelDB-style log of `wandb.proto` `Record`s), so
tests can check the config, history and tables wandb itself recorded.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

BLOCK = 32768
HEADER = 7  # ":W&B", a 2-byte magic and a version byte


def records(path: str | Path):
    """Yield every `wandb_internal_pb2.Record` in a `.wandb` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a wandb transaction log"
    position, pending = HEADER, b""
    while position + 7 <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < 7:  # block trailer padding
            position += left_in_block
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL or LAST fragment
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def read_run(run_dir: str | Path, timeout: float = 60.0) -> dict:
    """
    Config updates (key -> value), history rows (key -> value) and table file paths of an offline run folder. Waits
    for the run's `exit` record: wandb's core process may still be writing the log after `wandb.finish()` returns.
    """
    (log,) = Path(run_dir).glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = list(records(log))
        except Exception:  # a record cut in the middle of being written
            found = []
        if any(r.WhichOneof("record_type") == "exit" for r in found) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    config, history = {}, []
    for record in found:
        kind = record.WhichOneof("record_type")
        if kind == "config":
            for item in record.config.update:
                config[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
    tables = sorted(Path(run_dir).glob("files/media/table/**/*.table.json"))
    return {"config": config, "history": history, "tables": tables}
