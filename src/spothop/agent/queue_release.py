"""The agent's lease releaser for spothop's own shard queue.

When the job's queue is known (``--queue-url`` and ``--job-id``, or
``SPOTHOP_QUEUE_URL`` and ``SPOTHOP_JOB_ID``), a preempted worker's leases go
back to that queue through :meth:`spothop.queue.ShardQueue.release_worker`.
The queue package (and SQLAlchemy or redis-py under it) is imported only when
a release happens, so the agent stays small while it watches.
"""

from __future__ import annotations


class QueueReleaser:
    """Releases a worker's leases in one job's queue (SQLite, PostgreSQL or Redis URL)."""

    def __init__(self, queue_url: str, job_id: str) -> None:
        self.queue_url = queue_url
        self.job_id = job_id

    def release_worker(self, worker_id: str) -> int:
        from spothop.queue import open_queue

        with open_queue(self.queue_url, self.job_id) as queue:
            return queue.release_worker(worker_id)


def queue_releaser(queue_url: str | None, job_id: str | None) -> QueueReleaser | None:
    """A releaser when both the queue and the job are known; None otherwise."""
    return QueueReleaser(queue_url, job_id) if queue_url and job_id else None
