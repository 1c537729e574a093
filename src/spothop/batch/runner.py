"""Submit a batch job (split and enqueue) and run a worker on it."""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable

from spothop.batch.function import BatchFunction, CommandProcess, command_process
from spothop.batch.identity import check_resubmission
from spothop.batch.inputs import plan_shards
from spothop.batch.shards import WorkerReport, WorkItem, process_shards
from spothop.batch.spec import BatchSpec
from spothop.queue.base import ShardQueue
from spothop.queue.errors import BatchSpecError, UnknownJobError
from spothop.queue.model import QueuePolicy, ShardRecord
from spothop.queue.open import open_queue
from spothop.queue.outputs import OutputStore


def submit(spec: BatchSpec, queue: ShardQueue | None = None) -> int:
    """Split the input and enqueue its shards; returns how many were new (resubmitting adds none).

    A job already submitted with other sharding is refused (:mod:`.identity`), naming the difference.
    """
    owned = queue is None
    queue = queue or open_queue(spec.queue, spec.name)
    try:
        planned = plan_shards(spec.input)
        check_resubmission(spec.name, planned, _stored(queue))
        return queue.enqueue(planned, QueuePolicy(max_attempts=spec.max_attempts))
    finally:
        if owned:
            queue.close()


def _stored(queue: ShardQueue) -> list[ShardRecord]:
    try:
        return queue.records()
    except UnknownJobError:  # never submitted: nothing to compare with
        return []


def resolve_process(
    spec: BatchSpec, fn: BatchFunction | None = None
) -> Callable[[WorkItem], bytes]:
    if fn is not None:
        return fn.process_item
    if spec.command is not None:
        return command_process(spec.command)
    if spec.function is None:
        raise BatchSpecError(
            "function: the spec names no function or command, and none was given in code"
        )
    module_name, _, attribute = spec.function.partition(":")
    try:
        target = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise BatchSpecError(f"function: cannot import {spec.function!r}: {exc}") from exc
    found = target if isinstance(target, BatchFunction) else BatchFunction(target)  # type: ignore[arg-type]
    return found.process_item


def run_worker(
    spec: BatchSpec,
    fn: BatchFunction | None = None,
    *,
    worker: str | None = None,
    should_stop: Callable[[], bool] | None = None,
    queue: ShardQueue | None = None,
    store: OutputStore | None = None,
) -> WorkerReport:
    """Work on the job's shards until none is left or a stop is requested (see :func:`process_shards`)."""
    process = resolve_process(spec, fn)
    owned = queue is None
    queue = queue or open_queue(spec.queue, spec.name)
    try:
        return process_shards(
            queue,
            worker or f"{socket.gethostname()}-{os.getpid()}",
            process,
            store=store or OutputStore(spec.output),
            lease_s=spec.lease_s,
            should_stop=should_stop,
        )
    finally:
        if isinstance(process, CommandProcess):
            process.stop()  # a command still running on a released shard (a stop came first) ends here
        if owned:
            queue.close()
