"""The shard work queue: leases with fencing tokens, on SQL (SQLite, PostgreSQL) or Redis.

``open_queue(url, job)`` picks the backend from the URL; the contract every
backend keeps is :class:`ShardQueue`'s docstring. Outputs are made
exactly-once by :class:`OutputStore`: write under a temporary name, complete
(the fenced commit), then publish.
"""

from __future__ import annotations

from spothop.queue.base import ShardQueue
from spothop.queue.errors import (
    AlreadyCompletedError,
    LeaseLost,
    MalformedShardError,
    QueueError,
    QueueUnavailableError,
    UnknownJobError,
    UnknownLeaseError,
)
from spothop.queue.model import (
    Completion,
    Lease,
    QueuePolicy,
    QueueStats,
    Shard,
    ShardRecord,
    ShardState,
)
from spothop.queue.open import open_queue
from spothop.queue.outputs import OutputStore, finalize_outputs

__all__ = [
    "AlreadyCompletedError",
    "Completion",
    "Lease",
    "LeaseLost",
    "MalformedShardError",
    "OutputStore",
    "QueueError",
    "QueuePolicy",
    "QueueStats",
    "QueueUnavailableError",
    "Shard",
    "ShardQueue",
    "ShardRecord",
    "ShardState",
    "UnknownJobError",
    "UnknownLeaseError",
    "finalize_outputs",
    "open_queue",
]
