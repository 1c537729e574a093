"""Releasing a worker's leases in spothop's own shard queue, directly.

The embedded control plane releases through it, and the HTTP control plane
falls back on it when the server cannot be reached: a preempted worker's
shards must go back to the queue even when the control plane is down, as
long as the queue itself answers. The queue package (and SQLAlchemy or
redis-py under it) is imported only by :meth:`QueueLeases.prepare` or a
release, so the agent stays small while it watches.
"""

from __future__ import annotations

import importlib


class QueueLeases:
    """Releases a worker's leases in one job's queue (SQLite, PostgreSQL or Redis URL)."""

    def __init__(self, queue_url: str, job_id: str) -> None:
        self.queue_url = queue_url
        self.job_id = job_id

    def prepare(self) -> None:
        """Import the queue package now (it takes a second on a busy machine), so a release is fast later."""
        importlib.import_module("spothop.queue")

    def warm(self) -> None:
        """Open the queue once and close it: a first open sets up the driver and the tables (a few hundred
        ms); the release's own open is then a few ms. Raises QueueError when the queue is down."""
        from spothop.queue import open_queue

        with open_queue(self.queue_url, self.job_id) as queue:
            queue.stats()

    def release_worker(self, worker_id: str) -> int:
        """Requeue every shard leased to ``worker_id``; how many. Raises QueueError when the queue is down."""
        from spothop.queue import open_queue

        with open_queue(self.queue_url, self.job_id) as queue:
            return queue.release_worker(worker_id)


def queue_leases(queue_url: str | None, job_id: str | None) -> QueueLeases | None:
    """A releaser when both the queue and the job are known; None otherwise, and None for a
    queue reached through the control plane (an ``http(s)://`` URL): the control plane's own
    release is then the only way, and falling back on it again would change nothing."""
    if not queue_url or not job_id or queue_url.startswith(("http:", "https:")):
        return None
    return QueueLeases(queue_url, job_id)
