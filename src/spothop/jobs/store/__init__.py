"""The job store: jobs, their nodes, instance attempts and events, on spothop's state tables.

The controller's one place to remember things (``docs/state.md``, "Jobs").
The contract:

1. **One transaction per change, with its event.** Every method that changes
   something writes it and the event that records it (``job_events``) in one
   transaction: the store never holds a state change without its event, nor
   an event for a change that did not happen.
2. **Legal transitions only.** :meth:`JobStore.transition` checks
   :data:`~spothop.jobs.lifecycle.TRANSITIONS` against the state read *in the
   same transaction* and refuses an illegal one
   (:class:`~spothop.jobs.lifecycle.IllegalTransition`), changing nothing;
   :meth:`JobStore.update_attempt` does the same for attempt states.
3. **Attempts before launches.** :meth:`JobStore.add_attempt` is called
   *before* the provider's launch call: the attempt (state ``launching``) and
   its launch token are stored first, so an instance the cloud started is
   always known (its tags carry the token) even if the controller dies
   mid-call.
4. **Fencing.** Each jobs row has a ``version`` (+ 1 at every write of the
   row): a write given ``expected_version`` happens only if no one wrote the
   row since (else :class:`JobChanged`). And a controller lease
   (:meth:`JobStore.claim_jobs`, through :mod:`spothop.state.leases`): a write
   given a :class:`JobLease` happens only while that lease holds (else
   :class:`JobLeaseLost`), so several controllers can share one store.
   :meth:`JobStore.fenced` is a view of the store whose *every* write of a
   job (attempts, events, nodes, the row) checks, in its own transaction,
   that the lease its holder gives for that job still holds: a controller
   replica that lost a job (paused past its lease, another took it) can
   write nothing of it (``docs/controller.md``, "Replicas").
5. **Ids** are short and readable: jobs ``j-`` + 6 hex digits (``j-3f9a2c``),
   attempts ``a-`` + 8; unique (a collision is drawn again).
6. **Time** comes from the ``clock`` (default :func:`time.time`), so a
   simulator can drive the store on a virtual clock. Times are unix seconds.

SQLite (the home's ``spothop.db``) by default, PostgreSQL by URL; the schema is
brought up to date when the store opens (:func:`spothop.state.ensure_schema`).

:class:`JobStore` is composed of one part per table, each in its own module:
``job_rows`` (jobs and their nodes), ``controller_leases`` (which controller
runs which job), ``attempts`` (instance attempts), ``events`` (the event log),
``cooldowns`` (markets kept out of placement) and ``cursors`` (a controller's
positions), on ``base`` (the engine, the clock, fencing and the event write
they share). Import the store and its records from here.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from sqlalchemy import Engine

from spothop.db import make_engine
from spothop.jobs.errors import AttemptNotFound, JobChanged, JobLeaseLost, JobNotFound
from spothop.jobs.records import (
    AttemptRecord,
    Cooldown,
    JobEvent,
    JobLease,
    JobRecord,
    NodeRecord,
    StorableSpec,
    node_count,
)
from spothop.jobs.store.attempts import AttemptRows
from spothop.jobs.store.base import Clock, Holder
from spothop.jobs.store.controller_leases import ControllerLeases
from spothop.jobs.store.cooldowns import CooldownRows
from spothop.jobs.store.cursors import CursorRows
from spothop.jobs.store.events import EventRows
from spothop.jobs.store.job_rows import JobRows
from spothop.state.migrate import ensure_schema

__all__ = [
    "AttemptNotFound",
    "AttemptRecord",
    "Cooldown",
    "JobChanged",
    "JobEvent",
    "JobLease",
    "JobLeaseLost",
    "JobNotFound",
    "JobRecord",
    "JobStore",
    "NodeRecord",
    "StorableSpec",
    "node_count",
]


class JobStore(JobRows, ControllerLeases, AttemptRows, EventRows, CooldownRows, CursorRows):
    """Jobs, nodes, attempts, events, cooldowns and cursors (see the package's contract).

    ``url``: a SQLAlchemy URL (default :func:`spothop.db.default_database_url`:
    the home's SQLite, or ``SPOTHOP_DATABASE_URL``); or an ``engine``.
    ``schema``: a PostgreSQL schema for the tables. ``idle_transaction_timeout_s``: the
    server ends a session of the store's own engine idle that long inside a transaction, and
    its row locks with it (:func:`spothop.db.make_engine`; a replica's). Safe to share between
    threads; several processes may open one store.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        schema: str | None = None,
        clock: Clock | None = None,
        idle_transaction_timeout_s: float | None = None,
    ) -> None:
        self._owns_engine = engine is None
        base = (
            engine
            if engine is not None
            else make_engine(url, idle_transaction_timeout_s=idle_transaction_timeout_s)
        )
        self._base_engine = base
        self._engine = (
            base.execution_options(schema_translate_map={None: schema}) if schema else base
        )
        self._clock = clock or time.time
        self._holder = None
        self._on_lost = None
        ensure_schema(base, schema)

    def fenced(self, holder: Holder, *, on_lost: Callable[[str], object] | None = None) -> JobStore:
        """This store (same engine, same clock) with every write of a job fenced by ``holder(job_id)``.

        Each write of a job (:meth:`transition`, :meth:`update_job`,
        :meth:`set_node_state`, :meth:`add_attempt`, :meth:`update_attempt`,
        :meth:`record_event`, :meth:`check_lease`) first locks the job's row
        under the lease ``holder`` gives, in the write's own transaction, and
        raises :class:`JobLeaseLost` (nothing written) when there is none or the
        database says it no longer holds (expired, or claimed by another);
        ``on_lost(job_id)`` is called first, so the holder drops the job. Jobs
        are created unfenced (no one holds a new job); cooldowns and cursors are
        not a job's. Closing the view leaves the engine open.
        """
        view = copy.copy(self)
        view._owns_engine = False
        view._holder = holder
        view._on_lost = on_lost
        return view

    def check_lease(self, job_id: str) -> None:
        """Raise :class:`JobLeaseLost` unless this view holds ``job_id`` (no-op on an unfenced store).

        For what the database cannot fence (a cloud call): checked right before it.
        """
        if self._holder is None:
            return
        with self._engine.begin() as conn:
            self._fence(conn, job_id, self._clock())

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        """Release the store's connections (an engine given to the store is left open)."""
        if self._owns_engine:
            self._base_engine.dispose()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
