"""What every part of the job store shares: its engine and clock, fencing, and the event write.

:class:`StoreBase` declares the state a :class:`~spothop.jobs.store.JobStore` is
made of (set by ``JobStore.__init__`` and ``JobStore.fenced``) and holds the steps
that each table's writes are built from, all inside the caller's transaction:

- :meth:`StoreBase._fence` locks a job's row under the lease that a fenced view's
  holder gives for it, or raises :class:`~spothop.jobs.errors.JobLeaseLost`
  (``on_lost(job_id)`` called first); a no-op on an unfenced store (the package's
  contract, 4).
- :meth:`StoreBase._event` writes one ``job_events`` row and returns its ``seq``
  (contract 1: a change and its event in one transaction); :func:`_jsonable`
  makes its data writable as JSON (enums as their values, market ids as dicts).
- :meth:`StoreBase._has_job` and :meth:`StoreBase._no_node` tell a missing job
  (:class:`~spothop.jobs.errors.JobNotFound`) from a missing node.

``_leases`` (the jobs table's lease columns, for :mod:`spothop.state.leases`) and
``_ID_DRAWS`` are shared by the store's modules, not by its users.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select

from spothop.errors import NotFoundError
from spothop.jobs.errors import JobLeaseLost, JobNotFound
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, NodeState
from spothop.jobs.records import JobLease
from spothop.resources.market_id import MarketId
from spothop.state.job_tables import job_events, job_nodes, jobs
from spothop.state.leases import Leases

Clock = Callable[[], float]
Holder = Callable[[str], "JobLease | None"]  # job id → the lease a fenced view writes it under
_ID_DRAWS = 20  # id draws before giving up (a store this full needs longer ids, not luck)

_leases = Leases(
    jobs,
    key=(jobs.c.job_id,),
    token=jobs.c.lease_token,
    expires=jobs.c.lease_expires_unix_s,
    held=jobs.c.lease_owner.is_not(None),
)


class StoreBase:
    """The state and plumbing of a job store; :class:`~spothop.jobs.store.JobStore` sets it up."""

    _engine: Engine
    _clock: Clock
    _holder: Holder | None
    _on_lost: Callable[[str], object] | None

    def _held(self, job_id: str) -> JobLease:
        """The lease this fenced view writes ``job_id`` under (:class:`JobLeaseLost` if none)."""
        assert self._holder is not None
        lease = self._holder(job_id)
        if lease is None:
            raise self._lost(job_id, None)
        return lease

    def _lost(self, job_id: str, token: int | None) -> JobLeaseLost:
        if self._on_lost is not None:
            with contextlib.suppress(Exception):  # the holder's bookkeeping must not hide it
                self._on_lost(job_id)
        return JobLeaseLost(job_id, token)

    def _fence(self, conn: Connection, job_id: str, now: float) -> None:
        """Lock the job's row under this view's lease, in ``conn``'s transaction, or raise.

        ``SELECT … FOR UPDATE`` on the fenced condition: a claim by another
        controller waits for this transaction (or this waits for it, and then
        finds the token changed); on SQLite the transaction already holds the
        write lock. No-op on an unfenced store.
        """
        if self._holder is None:
            return
        lease = self._held(job_id)
        row = conn.execute(
            select(jobs.c.job_id)
            .where(_leases.fenced((job_id,), lease.token, now))
            .with_for_update()
        ).first()
        if row is None:
            raise self._lost(job_id, lease.token)

    @staticmethod
    def _event(
        conn: Connection, job_id: str, now: float, kind: str, data: Mapping[str, Any]
    ) -> int:
        result = conn.execute(
            insert(job_events).values(
                job_id=job_id, time_unix_s=now, kind=kind, data=json.dumps(_jsonable(data))
            )
        )
        key = result.inserted_primary_key
        assert key is not None  # an INSERT of one row always has one
        return int(key[0])

    @classmethod
    def _no_node(cls, conn: Connection, job_id: str, node: int) -> NotFoundError:
        if not cls._has_job(conn, job_id):
            return JobNotFound(job_id)
        count = conn.execute(
            select(func.count()).select_from(job_nodes).where(job_nodes.c.job_id == job_id)
        ).scalar_one()
        return NotFoundError(f"job {job_id} has no node {node} (its nodes are 0 to {count - 1})")

    @staticmethod
    def _has_job(conn: Connection, job_id: str) -> bool:
        return (
            conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id)).first() is not None
        )


def _jsonable(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with enums as their values and market ids as dicts (what json.dumps can write)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, MarketId):
            out[key] = value.to_dict()
        elif isinstance(value, (JobState, AttemptState, EndReason, NodeState)):
            out[key] = value.value
        elif isinstance(value, Mapping):
            out[key] = _jsonable(value)
        elif isinstance(value, (tuple, set, frozenset)):
            out[key] = list(value)
        else:
            out[key] = value
    return out
