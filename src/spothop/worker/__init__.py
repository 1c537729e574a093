"""What a worker process uses: the agent SDK (stop requests, heartbeats) and shard helpers.

``stop_requested()``, ``on_stop()``, ``seconds_left()``, ``heartbeat()``,
``checkpoint_requested()`` and ``saved()`` talk to the on-instance agent and
are harmless no-ops when no agent runs. ``iter_shards()`` and
``process_shards()`` claim shards under a lease with heartbeats, and on a stop
release the current shard and return.
"""

from __future__ import annotations

from spothop.worker.sdk import (
    checkpoint_requested,
    heartbeat,
    on_stop,
    saved,
    seconds_left,
    stop_requested,
)
from spothop.worker.shards import (
    StopWatch,
    WorkerReport,
    WorkItem,
    iter_shards,
    process_shards,
)

__all__ = [
    "StopWatch",
    "WorkItem",
    "WorkerReport",
    "checkpoint_requested",
    "heartbeat",
    "iter_shards",
    "on_stop",
    "process_shards",
    "saved",
    "seconds_left",
    "stop_requested",
]
