"""``@spothop.batch``: a Python function as a batch job's per-shard work."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from spothop.batch.inputs import BatchShard
from spothop.worker.shards import WorkItem

ProcessFn = Callable[[BatchShard], Any]
# A worker command that takes longer is stuck; the lease's heartbeat keeps it
# alive meanwhile, so this bounds a hang, not normal work.
COMMAND_TIMEOUT_S = 24 * 3600


def to_bytes(output: Any) -> bytes:
    """A shard's output as bytes: bytes as they are, text as UTF-8, anything else as JSON Lines
    (a list becomes one line per element) with sorted keys, so a rerun writes identical bytes."""
    if isinstance(output, bytes):
        return output
    if isinstance(output, str):
        return output.encode()
    items = output if isinstance(output, list) else [output]
    return "".join(json.dumps(item, sort_keys=True) + "\n" for item in items).encode()


class BatchFunction:
    """A decorated ``process(shard) -> output``; still callable as the plain function."""

    def __init__(self, fn: ProcessFn) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, shard: BatchShard) -> Any:
        return self.fn(shard)

    def process_item(self, item: WorkItem) -> bytes:
        return to_bytes(self.fn(BatchShard(item.shard_id, item.payload)))


def batch(fn: ProcessFn) -> BatchFunction:
    """Mark ``process(shard) -> output`` as a batch job's work: ``spothop.batch.run_worker`` runs it."""
    return BatchFunction(fn)


def command_process(command: Sequence[str]) -> Callable[[WorkItem], bytes]:
    """Per shard, run ``command`` with the shard as JSON on stdin; its stdout is the output.

    A non-zero exit fails the shard with the end of its stderr.
    """
    def run(item: WorkItem) -> bytes:
        shard = json.dumps({"id": item.shard_id, "payload": item.payload})
        done = subprocess.run(list(command), input=shard.encode(), capture_output=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace")[-500:]
            raise RuntimeError(f"command exited {done.returncode}: {tail}")
        return done.stdout
    return run
