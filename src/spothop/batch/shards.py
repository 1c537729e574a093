"""Worker helpers: iterate a job's shards with automatic heartbeats, stop cleanly.

::

    for item in iter_shards(queue, "worker-1", store=store):
        item.commit(process(item.payload))     # write, fenced complete, publish

A background thread heartbeats the current lease every ``lease_s / 3``. When
a stop is requested (``should_stop()`` returns true, or SIGTERM arrives —
the signal a spot agent sends on a preemption notice), the shard in hand is
released, not failed (its attempt is refunded), and the iteration ends.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any

from spothop.queue.base import ShardQueue
from spothop.queue.errors import LeaseLost, QueueError
from spothop.queue.model import DEFAULT_LEASE_S, Completion, Lease
from spothop.queue.outputs import OutputStore, finalize_outputs
from spothop.worker.sdk import heartbeat, stop_requested

log = logging.getLogger(__name__)

# Three heartbeats per lease: one may be lost or late without the lease expiring.
HEARTBEATS_PER_LEASE = 3
# How often an idle worker asks again for work, and checks for a stop while waiting.
DEFAULT_POLL_S = 0.5
STOP_CHECK_S = 0.05


class StopWatch:
    """True once a stop is requested: by ``should_stop``, or by SIGTERM when ``on_sigterm``.

    The SIGTERM handler only sets a flag (and is installed only from the main
    thread, the only one Python lets set handlers); :meth:`restore` puts the
    previous handler back.
    """

    def __init__(
        self, should_stop: Callable[[], bool] | None = None, on_sigterm: bool = True
    ) -> None:
        # Under an agent, its stop request counts too (a no-op without one).
        self._should_stop = should_stop or stop_requested
        self._flag = threading.Event()
        self._previous: Any = None
        self._installed = on_sigterm and threading.current_thread() is threading.main_thread()
        if self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        self._flag.set()

    def request(self) -> None:
        self._flag.set()

    def __call__(self) -> bool:
        if not self._flag.is_set() and self._should_stop is not None and self._should_stop():
            self._flag.set()
        return self._flag.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early on a stop; returns whether one was requested."""
        waited = 0.0
        while waited < seconds:
            if self():
                return True
            self._flag.wait(min(STOP_CHECK_S, seconds - waited))
            waited += STOP_CHECK_S
        return self()

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False


class WorkItem:
    """One leased shard in a worker's hands. Settle it once: commit, complete, fail or release."""

    def __init__(
        self, queue: ShardQueue, lease: Lease, store: OutputStore | None, stop: StopWatch
    ) -> None:
        self.queue = queue
        self.lease = lease
        self.store = store
        self.stop_requested = stop
        self.settled = False
        self.lost = threading.Event()

    @property
    def shard_id(self) -> str:
        return self.lease.shard_id

    @property
    def payload(self) -> Any:
        return self.lease.payload

    def commit(self, data: bytes) -> Completion:
        """Exactly-once output through the store (see :mod:`spothop.queue.outputs`). LeaseLost propagates."""
        if self.store is None:
            raise QueueError(
                "commit needs an OutputStore: pass store= to iter_shards, or use complete()"
            )
        self.settled = True
        return _done(self.store.commit(self.queue, self.lease, data))

    def complete(self, output_ref: str) -> Completion:
        self.settled = True
        return _done(self.queue.complete(self.lease, output_ref))

    def fail(self, error: str) -> None:
        self.settled = True
        self.queue.fail(self.lease, error)

    def release(self) -> None:
        """Give the shard back; a lease already lost has nothing to give back."""
        self.settled = True
        with contextlib.suppress(LeaseLost):
            self.queue.release(self.lease)


def _done(completion: Completion) -> Completion:
    """A shard done is work done: the worker beats to its agent (``sdk.heartbeat``), whose next
    heartbeat carries it, so that a report counts this instance's time as useful even when the
    cloud takes it before the worker's clean exit (``observe/work.py``)."""
    heartbeat()
    return completion


class Heartbeater:
    """Extends a work item's lease from a background thread until stopped, or the lease is lost."""

    def __init__(self, item: WorkItem, interval_s: float) -> None:
        self._item = item
        self._interval_s = interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{item.shard_id}", daemon=True
        )

    def __enter__(self) -> Heartbeater:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            try:
                self._item.lease = self._item.queue.heartbeat(self._item.lease)
            except LeaseLost:
                self._item.lost.set()
                return
            except Exception as exc:  # keep beating: the next one may get through
                log.warning("heartbeat for shard %s failed: %s", self._item.shard_id, exc)


def _drained(queue: ShardQueue) -> bool:
    stats = queue.stats()
    return stats.pending == 0 and stats.leased == 0


def iter_shards(
    queue: ShardQueue,
    worker: str,
    *,
    store: OutputStore | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    should_stop: Callable[[], bool] | None = None,
    stop_on_sigterm: bool = True,
    poll_s: float = DEFAULT_POLL_S,
    until_drained: bool = True,
) -> Iterator[WorkItem]:
    """Yield leased shards one at a time, heartbeating each while the loop body runs.

    Ends when a stop is requested (the shard in hand is released), or, with
    ``until_drained``, when no shard is pending or leased any more (then, with
    a ``store``, :func:`finalize_outputs` runs). A body that leaves a shard
    unsettled without a stop fails it, so a forgotten shard cannot loop forever.
    """
    stop = StopWatch(should_stop, stop_on_sigterm)
    try:
        while not stop():
            leases = queue.claim(worker, 1, lease_s)
            if not leases:
                if until_drained and _drained(queue):
                    if store is not None:
                        finalize_outputs(queue, store)
                    return
                stop.wait(poll_s)
                continue
            item = WorkItem(queue, leases[0], store, stop)
            with Heartbeater(item, lease_s / HEARTBEATS_PER_LEASE):
                try:
                    yield item
                except GeneratorExit:
                    if not item.settled:
                        item.release()
                    raise
            if not item.settled:
                if stop():
                    item.release()
                    return
                item.fail("the worker's loop neither completed nor failed the shard")
    finally:
        stop.restore()


@dataclass
class WorkerReport:
    """What one worker did: shards committed, failed (to be retried or dead), released on a
    stop, lost (the lease expired under it), and whether a stop ended it."""

    committed: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    stopped: bool = False

    def to_dict(self) -> dict[str, int | bool]:
        return asdict(self)


def process_shards(
    queue: ShardQueue,
    worker: str,
    process: Callable[[WorkItem], bytes],
    *,
    store: OutputStore,
    lease_s: float = DEFAULT_LEASE_S,
    should_stop: Callable[[], bool] | None = None,
    stop_on_sigterm: bool = True,
    poll_s: float = DEFAULT_POLL_S,
    until_drained: bool = True,
) -> WorkerReport:
    """Run ``process`` on shard after shard and commit its bytes exactly once.

    ``process`` runs in a helper thread so that a stop request is honoured at
    once: the shard is released and this returns, without waiting for
    ``process`` (whose late result is thrown away). An exception from
    ``process`` fails the shard (retried with backoff, then dead-lettered).
    """
    report = WorkerReport()
    stop = StopWatch(should_stop, stop_on_sigterm)
    try:
        for item in iter_shards(
            queue,
            worker,
            store=store,
            lease_s=lease_s,
            should_stop=stop,
            stop_on_sigterm=False,
            poll_s=poll_s,
            until_drained=until_drained,
        ):
            outcome = _run_interruptibly(process, item, stop)
            if outcome is None:
                item.release()
                report.released += 1
                report.stopped = True
                return report
            _settle(item, outcome, report)
        report.stopped = stop()
        return report
    finally:
        stop.restore()


def _run_interruptibly(
    process: Callable[[WorkItem], bytes], item: WorkItem, stop: StopWatch
) -> tuple[bytes | None, str | None] | None:
    """(output, None) or (None, error); None when a stop came first."""
    result: list[tuple[bytes | None, str | None]] = []

    def target() -> None:
        try:
            result.append((process(item), None))
        except Exception as exc:
            result.append((None, "".join(traceback.format_exception_only(exc)).strip()))

    thread = threading.Thread(target=target, name=f"process-{item.shard_id}", daemon=True)
    thread.start()
    while thread.is_alive():
        if stop() or item.lost.is_set():
            return None if stop() else (None, None)
        thread.join(STOP_CHECK_S)
    return result[0]


def _settle(item: WorkItem, outcome: tuple[bytes | None, str | None], report: WorkerReport) -> None:
    output, error = outcome
    try:
        if item.lost.is_set():
            raise LeaseLost(
                item.lease.job, item.shard_id, item.lease.token, "a heartbeat found it lost"
            )
        if error is not None or output is None:
            item.fail(error or "process returned no output")
            report.failed += 1
        else:
            item.commit(output)
            report.committed += 1
    except LeaseLost:
        item.settled = True
        report.lost += 1
