"""``@spothop.batch``: a Python function as a batch job's per-shard work."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from spothop.batch.inputs import BatchShard
from spothop.batch.shards import WorkItem

ProcessFn = Callable[[BatchShard], Any]
# A worker command that takes longer is stuck; the lease's heartbeat keeps it
# alive meanwhile, so this bounds a hang, not normal work.
COMMAND_TIMEOUT_S = 24 * 3600
# On a stop the shard is already released; the command gets a moment to exit
# cleanly (flush a log), then it and everything it started are killed.
COMMAND_STOP_GRACE_S = 3.0


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
    """Mark ``process(shard) -> output`` as a batch job's work: :func:`spothop.batch.runner.run_worker` runs it."""
    return BatchFunction(fn)


class CommandProcess:
    """Per shard, run ``command`` with the shard as JSON on stdin; its stdout is the output.

    A non-zero exit fails the shard with the end of its stderr. Each run is in
    its own process group, so that :meth:`stop` reaches the command and every
    process it started: the worker calls it when it stops (a SIGTERM, a
    preemption notice), since the shard was released and nothing may keep
    working on it. ``stop`` sends SIGTERM to each running group, waits up to
    :data:`COMMAND_STOP_GRACE_S`, then SIGKILLs what is left and reaps it.
    """

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._stopped = False

    def __call__(self, item: WorkItem) -> bytes:
        shard = json.dumps({"id": item.shard_id, "payload": item.payload}).encode()
        with self._lock:
            if self._stopped:
                raise RuntimeError("the worker is stopping; the command was not started")
            child = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self._running.add(child)
        try:
            out, err = child.communicate(shard, timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _end_group(child, 0.0)
            raise RuntimeError(
                f"command ran longer than {COMMAND_TIMEOUT_S} s and was killed"
            ) from None
        finally:
            with self._lock:
                self._running.discard(child)
        if child.returncode != 0:
            tail = err.decode(errors="replace")[-500:]
            raise RuntimeError(f"command exited {child.returncode}: {tail}")
        return out

    def stop(self, grace_s: float = COMMAND_STOP_GRACE_S) -> None:
        """End every running command's process group (SIGTERM, then SIGKILL after ``grace_s``); start no more."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for child in running:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in running:
            _end_group(child, max(0.0, deadline - time.monotonic()))


def _signal_group(child: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, sig)  # the group's id is the child's pid: start_new_session


def _end_group(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """Wait up to ``grace_s`` for the child, then SIGKILL its group and reap it."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=grace_s)
    _signal_group(
        child, signal.SIGKILL
    )  # also reaches what the child started, if it left them behind
    child.wait()


def command_process(command: Sequence[str]) -> CommandProcess:
    """The per-shard work of a ``command:`` spec (see :class:`CommandProcess`)."""
    return CommandProcess(command)
