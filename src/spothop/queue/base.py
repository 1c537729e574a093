"""The shard queue's contract, shared by every backend.

Rules every backend keeps (the conformance suite in ``tests/queue`` checks them):

- A queue is one job's: ``ShardQueue(job)``. Enqueueing creates the job;
  every other operation on a job never enqueued raises :class:`UnknownJobError`.
- ``claim`` hands out pending shards whose backoff has passed, and shards whose
  lease expired. Each claim increments the shard's fencing token and counts
  one attempt. An expired lease that was the shard's last allowed attempt
  sends the shard to the dead letters instead of being handed out again.
- A lease is valid while its token is the shard's newest and the queue clock
  is before its expiry. ``heartbeat``, ``complete``, ``release`` and ``fail``
  need a valid lease; otherwise they raise :class:`LeaseLost` and change nothing.
- ``complete`` is the commit: it succeeds only while the token is valid, and
  then records the output reference. Repeating it with the same lease and the
  same output returns the same result (``first=False``); with another output
  it raises :class:`AlreadyCompletedError`.
- ``release`` is a preemption: the shard is pending again at once and the
  attempt is refunded (``releases`` counts it). A lease that simply expires
  (a worker killed with no notice) is not refunded: a shard that crashes its
  worker every time must still reach the dead letters.
- ``fail`` counts a failure; the shard waits ``policy.backoff_s(attempts)``
  and is retried, or goes to the dead letters once it has used
  ``max_attempts`` attempts.
- Lost connections are retried with backoff inside each call; a call that
  still cannot reach the backend raises :class:`QueueUnavailableError`.

Times come from ``clock`` (epoch seconds, default :func:`time.time`) on the
caller's machine: hosts sharing a queue need synchronised clocks (NTP), and a
lease should be much longer than their skew.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Iterable, Sequence

from spothop.queue.errors import LeaseLost
from spothop.queue.model import (
    DEFAULT_LEASE_S,
    Completion,
    Lease,
    QueuePolicy,
    QueueStats,
    Shard,
    ShardRecord,
    ShardState,
    check_job_name,
)

Clock = Callable[[], float]


class ShardQueue(abc.ABC):
    """One job's shard queue. Thread-safe: workers may share one instance across threads."""

    def __init__(self, job: str, clock: Clock | None = None) -> None:
        self.job = check_job_name(job)
        self.clock: Clock = clock or time.time

    @abc.abstractmethod
    def enqueue(self, shards: Iterable[Shard], policy: QueuePolicy | None = None) -> int:
        """Add shards; returns how many were new. Ids already in the job are left as they are.

        The first enqueue creates the job with ``policy`` (default
        :class:`QueuePolicy`); later ones keep the stored policy. A malformed id
        or payload raises :class:`MalformedShardError` and enqueues nothing.
        """

    @abc.abstractmethod
    def claim(self, worker: str, n: int = 1, lease_s: float = DEFAULT_LEASE_S) -> list[Lease]:
        """Lease up to ``n`` claimable shards to ``worker`` for ``lease_s`` seconds (maybe none)."""

    @abc.abstractmethod
    def heartbeat(self, lease: Lease, lease_s: float | None = None) -> Lease:
        """Extend a valid lease to ``now + lease_s`` (default: its original length); else LeaseLost."""

    @abc.abstractmethod
    def complete(self, lease: Lease, output_ref: str) -> Completion:
        """Commit the shard as done with ``output_ref``, only while the lease is valid."""

    @abc.abstractmethod
    def release(self, lease: Lease) -> None:
        """Give a valid lease back (preemption): pending at once, attempt refunded."""

    @abc.abstractmethod
    def fail(self, lease: Lease, error: str) -> ShardState:
        """Record a failed attempt; returns PENDING (retried after backoff) or DEAD."""

    @abc.abstractmethod
    def stats(self) -> QueueStats:
        """Counts by state, and attempts, failures, releases and reclaims."""

    @abc.abstractmethod
    def records(self, state: ShardState | None = None) -> list[ShardRecord]:
        """Every shard of the job (or those in ``state``), in enqueue order."""

    @abc.abstractmethod
    def retry_dead(self, shard_ids: Sequence[str] | None = None) -> int:
        """Make dead shards pending again with a fresh attempt count; returns how many.

        ``None`` retries every dead shard; an id that is not dead raises
        :class:`UnknownLeaseError` if the job lacks it, else is skipped.
        """

    def release_worker(self, worker: str) -> int:
        """Release every lease ``worker`` holds, as :meth:`release` would; returns how many.

        The agent calls this when its worker was stopped by a preemption and
        may not have released its own shards (a worker that ignored SIGTERM).
        Each release is fenced by the lease's token: a shard that moved on in
        the meantime (completed, or claimed again after expiry) is left alone.
        """
        released = 0
        for record in self.records(ShardState.LEASED):
            if record.worker != worker:
                continue
            lease = Lease(
                self.job, record.id, record.payload, record.token, worker, 0.0, record.attempts
            )
            try:
                self.release(lease)
            except LeaseLost:
                continue
            released += 1
        return released

    @abc.abstractmethod
    def drop(self) -> None:
        """Delete the job and all its shards (tests, and ``spothop`` cleaning up)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. The queue must not be used afterwards."""

    def get(self, shard_id: str) -> ShardRecord:
        """One shard's record; :class:`UnknownLeaseError` if the job lacks it."""
        from spothop.queue.errors import UnknownLeaseError

        for record in self.records():
            if record.id == shard_id:
                return record
        raise UnknownLeaseError(self.job, shard_id)

    def dead(self) -> list[ShardRecord]:
        """The dead letters: shards that used every attempt."""
        return self.records(ShardState.DEAD)

    def __enter__(self) -> ShardQueue:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def lease_ms(seconds: float) -> int:
    if seconds <= 0:
        from spothop.queue.errors import MalformedShardError

        raise MalformedShardError(f"lease_s must be positive, got {seconds}")
    return max(1, round(seconds * 1000))
