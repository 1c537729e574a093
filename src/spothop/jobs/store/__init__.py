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
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Row, func, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError

from spothop.db import make_engine
from spothop.errors import NotFoundError, SpothopError
from spothop.jobs.errors import AttemptNotFound, JobChanged, JobLeaseLost, JobNotFound
from spothop.jobs.lifecycle import (
    AttemptState,
    EndReason,
    JobState,
    NodeState,
    check_attempt_transition,
    check_transition,
)
from spothop.jobs.records import (
    AttemptRecord,
    Cooldown,
    JobEvent,
    JobLease,
    JobRecord,
    LeaseCensus,
    NodeRecord,
    StorableSpec,
    node_count,
)
from spothop.resources.market_id import MarketId
from spothop.state.job_tables import (
    controller_cursor,
    job_attempts,
    job_events,
    job_nodes,
    jobs,
    market_cooldowns,
)
from spothop.state.leases import Leases
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

Clock = Callable[[], float]
Holder = Callable[[str], "JobLease | None"]  # job id → the lease a fenced view writes it under
JOB_ID_PREFIX = "j-"
JOB_ID_HEX = 6  # 16.7 million ids: a collision is rare, and drawn again
ATTEMPT_ID_PREFIX = "a-"
ATTEMPT_ID_HEX = 8
_ID_DRAWS = 20  # id draws before giving up (a store this full needs longer ids, not luck)

# The attempt columns update_attempt may set (the rest are fixed at add_attempt).
ATTEMPT_FIELDS = frozenset(
    {
        "instance_id",
        "state",
        "running_unix_s",
        "noticed_unix_s",
        "ended_unix_s",
        "end_reason",
        "error_code",
        "error_message",
        "exit_code",
        "zone",
        "region",
    }
)
# The time column an attempt state stamps (with the clock) unless the caller gives it.
_STAMP = {
    AttemptState.RUNNING: "running_unix_s",
    AttemptState.NOTICED: "noticed_unix_s",
    AttemptState.ENDED: "ended_unix_s",
}

_leases = Leases(
    jobs,
    key=(jobs.c.job_id,),
    token=jobs.c.lease_token,
    expires=jobs.c.lease_expires_unix_s,
    held=jobs.c.lease_owner.is_not(None),
)


# The jobs a controller must run: live ones, and finished ones whose instance is still to end.
_NEEDS_CONTROLLER = jobs.c.state.in_([s.value for s in JobState if not s.final]) | (
    select(job_attempts.c.job_id)
    .where(
        job_attempts.c.job_id == jobs.c.job_id,
        job_attempts.c.state != AttemptState.ENDED.value,
    )
    .exists()
)


# Job ids put in a query's IN list at most (SQLite and PostgreSQL bound a statement's parameters);
# a longer filter is applied to pages of EVENT_PAGE events instead.
MAX_IN_IDS = 1000
EVENT_PAGE = 1000


class JobStore:
    """Jobs, nodes, attempts, events, cooldowns and cursors (see the module's contract).

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
        self._clock: Clock = clock or time.time
        self._holder: Holder | None = None
        self._on_lost: Callable[[str], object] | None = None
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

    # --- jobs ---------------------------------------------------------------------

    def create_job(self, spec: StorableSpec, *, nodes: int | None = None) -> str:
        """Store a new job (PENDING, its nodes pending, event ``created``); returns its id (``j-3f9a2c``).

        ``nodes`` defaults to :func:`node_count` of the spec.
        """
        count = node_count(spec) if nodes is None else nodes
        if count < 1:
            raise ValueError(f"a job needs at least one node, got {count}")
        spec_json = spec.to_json()
        kind = str(getattr(spec, "kind", "task"))
        for _ in range(_ID_DRAWS):
            job_id = JOB_ID_PREFIX + secrets.token_hex(JOB_ID_HEX // 2)
            now = self._clock()
            try:
                with self._engine.begin() as conn:
                    if conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id)).first():
                        continue
                    conn.execute(
                        insert(jobs).values(
                            job_id=job_id,
                            name=spec.name,
                            kind=kind,
                            spec_json=spec_json,
                            state=JobState.PENDING.value,
                            created_unix_s=now,
                            updated_unix_s=now,
                            interruptions=0,
                            retries_used=0,
                            on_demand_forced=False,
                            reason="",
                            version=1,
                            lease_token=0,
                        )
                    )
                    conn.execute(
                        insert(job_nodes),
                        [
                            {
                                "job_id": job_id,
                                "node": n,
                                "state": NodeState.PENDING.value,
                                "updated_unix_s": now,
                            }
                            for n in range(count)
                        ],
                    )
                    self._event(conn, job_id, now, "created", {"name": spec.name, "nodes": count})
                return job_id
            except IntegrityError:
                continue  # another process drew the same id between the check and the insert
        raise SpothopError(f"no free job id after {_ID_DRAWS} draws")

    def get_job(self, job_id: str) -> JobRecord:
        """The job with its nodes; :class:`JobNotFound` if there is none."""
        with self._engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).first()
            if row is None:
                raise JobNotFound(job_id)
            node_rows = conn.execute(
                select(job_nodes).where(job_nodes.c.job_id == job_id).order_by(job_nodes.c.node)
            ).all()
        return _job(row, node_rows)

    def list_jobs(
        self, states: Iterable[JobState] | None = None, *, limit: int | None = None
    ) -> list[JobRecord]:
        """Jobs (with their nodes), oldest first; only those in ``states`` if given."""
        query = select(jobs).order_by(jobs.c.created_unix_s, jobs.c.job_id)
        if states is not None:
            query = query.where(jobs.c.state.in_([JobState(s).value for s in states]))
        if limit is not None:
            query = query.limit(limit)
        with self._engine.connect() as conn:
            rows = conn.execute(query).all()
            ids = [r.job_id for r in rows]
            by_job: dict[str, list[Row[Any]]] = {i: [] for i in ids}
            if ids:
                for n in conn.execute(
                    select(job_nodes)
                    .where(job_nodes.c.job_id.in_(ids))
                    .order_by(job_nodes.c.job_id, job_nodes.c.node)
                ):
                    by_job[n.job_id].append(n)
        return [_job(r, by_job[r.job_id]) for r in rows]

    def transition(
        self,
        job_id: str,
        to: JobState,
        event_kind: str,
        data: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        add_interruptions: int = 0,
        add_retries: int = 0,
        on_demand_forced: bool | None = None,
        expected_version: int | None = None,
        lease: JobLease | None = None,
    ) -> JobRecord:
        """Move the job to ``to`` and record event ``event_kind`` (``data``) in one transaction.

        Refused (nothing changes) with :class:`IllegalTransition` if the job's
        state, read in this transaction, may not move to ``to``; with
        :class:`JobChanged` / :class:`JobLeaseLost` under ``expected_version`` /
        ``lease`` (module contract, 4). ``reason`` replaces the job's reason;
        the counters change with it. Returns the job as written.
        """
        target = JobState(to)
        change = _JobChange(target, reason, add_interruptions, add_retries, on_demand_forced)
        return self._write_job(job_id, event_kind, data, change, expected_version, lease)

    def update_job(
        self,
        job_id: str,
        event_kind: str,
        data: Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        add_interruptions: int = 0,
        add_retries: int = 0,
        on_demand_forced: bool | None = None,
        expected_version: int | None = None,
        lease: JobLease | None = None,
    ) -> JobRecord:
        """Change a job's counters or reason without a state change, with its event; like :meth:`transition`."""
        change = _JobChange(None, reason, add_interruptions, add_retries, on_demand_forced)
        return self._write_job(job_id, event_kind, data, change, expected_version, lease)

    def set_node_state(
        self,
        job_id: str,
        node: int,
        state: NodeState,
        event_kind: str,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        """Set one node's state and record the event, in one transaction (:class:`JobNotFound` if no such node)."""
        with self._engine.begin() as conn:
            now = self._clock()
            self._fence(conn, job_id, now)
            result = conn.execute(
                update(job_nodes)
                .where(job_nodes.c.job_id == job_id, job_nodes.c.node == node)
                .values(state=NodeState(state).value, updated_unix_s=now)
            )
            if result.rowcount == 0:
                raise self._no_node(conn, job_id, node)
            self._event(conn, job_id, now, event_kind, {"node": node, **(data or {})})

    # --- controller leases ----------------------------------------------------------

    def claim_jobs(
        self,
        owner: str,
        lease_s: float,
        *,
        limit: int = 1000,
        exclude: Collection[str] = (),
    ) -> list[JobLease]:
        """Lease up to ``limit`` jobs no other controller holds (free or expired), oldest first.

        The jobs a controller runs: every live job, and a finished one that
        still has a live attempt (its instance must still be ended). On
        PostgreSQL, jobs another claimer is taking are skipped, not waited on.
        A job already leased by ``owner`` is granted again (a new token: a
        restarted controller of the same name takes its jobs back at once)
        unless ``exclude`` names it; :meth:`renew_jobs` extends leases without
        changing their tokens.
        """
        now = self._clock()
        expires = now + lease_s
        free = (
            jobs.c.lease_owner.is_(None)
            | (jobs.c.lease_expires_unix_s <= now)
            | (jobs.c.lease_owner == owner)
        )
        where = _NEEDS_CONTROLLER & free
        if exclude:
            where = where & jobs.c.job_id.not_in(list(exclude))
        with self._engine.begin() as conn:
            rows = _leases.lock(
                conn,
                [jobs.c.job_id],
                where=where,
                order_by=[jobs.c.created_unix_s, jobs.c.job_id],
                limit=limit,
            )
            tokens = _leases.grant(
                conn, rows, expires, {"lease_owner": owner, "version": jobs.c.version + 1}
            )
        return [
            JobLease(r.job_id, token, owner, expires) for r, token in zip(rows, tokens, strict=True)
        ]

    def renew_jobs(
        self, leases: Iterable[JobLease], lease_s: float
    ) -> tuple[list[JobLease], list[str]]:
        """Extend each lease that still holds to now + ``lease_s`` (same token): (renewed, finished).

        A job that needs no controller any more (final, no live attempt) is
        released instead and listed as finished. A lease in neither list is
        lost (it expired, or another controller claimed the job): its holder
        must drop the job.
        """
        now = self._clock()
        expires = now + lease_s
        by_id = {lease.job_id: lease for lease in leases}
        if not by_id:
            return [], []
        held = (
            tuple_(jobs.c.job_id, jobs.c.lease_token).in_(
                [(lease.job_id, lease.token) for lease in by_id.values()]
            )
            & jobs.c.lease_owner.is_not(None)
            & (jobs.c.lease_expires_unix_s > now)
        )
        with self._engine.begin() as conn:  # two statements, whatever the number of jobs
            kept = conn.execute(
                update(jobs)
                .where(held & _NEEDS_CONTROLLER)
                .values(lease_expires_unix_s=expires)
                .returning(jobs.c.job_id)
            ).scalars()
            renewed_ids = set(kept)
            rest = [(j, lease.token) for j, lease in by_id.items() if j not in renewed_ids]
            finished: list[str] = []
            if rest:
                finished = sorted(
                    conn.execute(
                        update(jobs)
                        .where(
                            tuple_(jobs.c.job_id, jobs.c.lease_token).in_(rest)
                            & jobs.c.lease_owner.is_not(None)
                            & (jobs.c.lease_expires_unix_s > now)
                        )
                        .values(
                            lease_owner=None,
                            lease_expires_unix_s=None,
                            version=jobs.c.version + 1,
                        )
                        .returning(jobs.c.job_id)
                    ).scalars()
                )
        renewed = [
            JobLease(j, by_id[j].token, by_id[j].owner, expires) for j in sorted(renewed_ids)
        ]
        return renewed, finished

    def expire_jobs(self, leases: Iterable[JobLease]) -> int:
        """End each lease that still holds now (a clean stop); how many ended.

        A job that still needs a controller keeps its holder's name with an
        expiry of now, so the others claim it at once and share it out as a dead
        holder's (:meth:`lease_census`); one that needs none any more (final, no
        live attempt) is released outright, as :meth:`renew_jobs` does.
        """
        now = self._clock()
        pairs = [(lease.job_id, lease.token) for lease in leases]
        if not pairs:
            return 0
        held = (
            tuple_(jobs.c.job_id, jobs.c.lease_token).in_(pairs)
            & jobs.c.lease_owner.is_not(None)
            & (jobs.c.lease_expires_unix_s > now)
        )
        with self._engine.begin() as conn:
            done = conn.execute(
                update(jobs)
                .where(held & ~_NEEDS_CONTROLLER)
                .values(lease_owner=None, lease_expires_unix_s=None, version=jobs.c.version + 1)
            )
            live = conn.execute(
                update(jobs).where(held & _NEEDS_CONTROLLER).values(lease_expires_unix_s=now)
            )
        return int(done.rowcount) + int(live.rowcount)

    def lease_census(self, owner: str) -> LeaseCensus:
        """Other holders' leases as ``owner`` sees them (:class:`LeaseCensus`).

        What a replica's fair share of a dead (or stopped) replica's jobs is computed from,
        and when it has to look again to take a lapsing lease at once.
        """
        now = self._clock()
        others = _NEEDS_CONTROLLER & jobs.c.lease_owner.is_not(None) & (jobs.c.lease_owner != owner)
        with self._engine.connect() as conn:
            lapsed = conn.execute(
                select(func.count()).where(others & (jobs.c.lease_expires_unix_s <= now))
            ).scalar_one()
            holders, next_lapse = conn.execute(
                select(
                    func.count(func.distinct(jobs.c.lease_owner)),
                    func.min(jobs.c.lease_expires_unix_s),
                ).where(others & (jobs.c.lease_expires_unix_s > now))
            ).one()
        return LeaseCensus(
            int(lapsed), int(holders), None if next_lapse is None else float(next_lapse)
        )

    def release_job(self, lease: JobLease) -> bool:
        """Give a lease up (False: it no longer held anyway)."""
        with self._engine.begin() as conn:
            result = _leases.fenced_update(
                conn,
                (lease.job_id,),
                lease.token,
                self._clock(),
                {"lease_owner": None, "lease_expires_unix_s": None, "version": jobs.c.version + 1},
            )
        return bool(result.rowcount)

    # --- attempts -------------------------------------------------------------------

    def add_attempt(
        self,
        job_id: str,
        node: int,
        *,
        provider: str,
        region: str,
        zone: str,
        instance_type: str,
        market_kind: str,
        price_usd_per_hour: float,
        launch_token: str | None = None,
        data: Mapping[str, Any] | None = None,
        launched_unix_s: float | None = None,
        generation: int = 0,
        group_nnodes: int | None = None,
    ) -> AttemptRecord:
        """Store a new attempt (state ``launching``) BEFORE the launch call, with event ``attempt_launching``.

        ``launched_unix_s`` (default: the store's clock) is the launch time on
        the provider's clock, which the controller keeps every attempt time in.

        ``launch_token`` (default: 16 random hex digits) goes into the
        instance's tags; it is unique. ``generation`` and ``group_nnodes``: a
        grouped task's group generation and its node count (docs/multinode.md). :class:`JobNotFound` if the job has no
        such node.
        """
        token = launch_token or secrets.token_hex(8)
        with self._engine.begin() as conn:
            if (
                conn.execute(
                    select(job_nodes.c.node).where(
                        job_nodes.c.job_id == job_id, job_nodes.c.node == node
                    )
                ).first()
                is None
            ):
                raise self._no_node(conn, job_id, node)
            now = self._clock()
            self._fence(conn, job_id, now)
            attempt_id = self._new_attempt_id(conn)
            values = {
                "attempt_id": attempt_id,
                "job_id": job_id,
                "node": node,
                "launch_token": token,
                "provider": provider,
                "region": region,
                "zone": zone,
                "instance_type": instance_type,
                "market_kind": str(market_kind),
                "price_usd_per_hour": float(price_usd_per_hour),
                "state": AttemptState.LAUNCHING.value,
                "launched_unix_s": now if launched_unix_s is None else float(launched_unix_s),
                "generation": int(generation),
                "group_nnodes": None if group_nnodes is None else int(group_nnodes),
            }
            conn.execute(insert(job_attempts).values(values))
            self._event(
                conn,
                job_id,
                now,
                "attempt_launching",
                {
                    "attempt_id": attempt_id,
                    "node": node,
                    "launch_token": token,
                    "provider": provider,
                    "region": region,
                    "zone": zone,
                    "instance_type": instance_type,
                    "market_kind": str(market_kind),
                    "price_usd_per_hour": float(price_usd_per_hour),
                    **({"generation": int(generation)} if group_nnodes is not None else {}),
                    **(data or {}),
                },
            )
            row = conn.execute(
                select(job_attempts).where(job_attempts.c.attempt_id == attempt_id)
            ).one()
        return _attempt(row)

    def update_attempt(
        self,
        attempt_id: str,
        *,
        event: str | None = None,
        data: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> AttemptRecord:
        """Set an attempt's ``fields`` (of :data:`ATTEMPT_FIELDS`) and record ``event``, in one transaction.

        A ``state`` change is checked against
        :data:`~spothop.jobs.lifecycle.ATTEMPT_TRANSITIONS` (read in this
        transaction; :class:`IllegalTransition`, nothing changed) and stamps
        its time column (``running_unix_s``, ``noticed_unix_s``,
        ``ended_unix_s``) unless given. The event (default
        ``attempt_<state>`` on a state change, none otherwise) carries the
        attempt id and the fields set, plus ``data``.
        """
        unknown = set(fields) - ATTEMPT_FIELDS
        if unknown:
            raise TypeError(
                f"update_attempt: no settable field {sorted(unknown)} (settable: {sorted(ATTEMPT_FIELDS)})"
            )
        values = dict(fields)
        with self._engine.begin() as conn:
            row = conn.execute(
                select(job_attempts.c.job_id, job_attempts.c.state).where(
                    job_attempts.c.attempt_id == attempt_id
                )
            ).first()
            if row is None:
                raise AttemptNotFound(attempt_id)
            now = self._clock()
            self._fence(conn, row.job_id, now)
            if "state" in values:
                target = AttemptState(values["state"])
                check_attempt_transition(
                    AttemptState(row.state), target, f"attempt {attempt_id} of job {row.job_id}"
                )
                values["state"] = target.value
                stamp = _STAMP.get(target)
                if stamp is not None and values.get(stamp) is None:
                    values[stamp] = now
                event = event or f"attempt_{target.value}"
            if "end_reason" in values and values["end_reason"] is not None:
                values["end_reason"] = EndReason(values["end_reason"]).value
            if values:
                # The state read above must still be the state written over (no lost update on PostgreSQL).
                result = conn.execute(
                    update(job_attempts)
                    .where(
                        job_attempts.c.attempt_id == attempt_id,
                        job_attempts.c.state == row.state,
                    )
                    .values(values)
                )
                if result.rowcount == 0:
                    current = conn.execute(
                        select(job_attempts.c.state).where(job_attempts.c.attempt_id == attempt_id)
                    ).scalar_one()
                    check_attempt_transition(
                        AttemptState(current),
                        AttemptState(values.get("state", current)),
                        f"attempt {attempt_id} of job {row.job_id}",
                    )
                    raise SpothopError(f"attempt {attempt_id}: changed while being written")
            if event:
                self._event(
                    conn,
                    row.job_id,
                    now,
                    event,
                    {"attempt_id": attempt_id, **_jsonable(values), **(data or {})},
                )
            written = conn.execute(
                select(job_attempts).where(job_attempts.c.attempt_id == attempt_id)
            ).one()
        return _attempt(written)

    def attempts(
        self, job_id: str | None = None, *, live_only: bool = False
    ) -> list[AttemptRecord]:
        """A job's attempts (every job's if ``job_id`` is None), in launch order."""
        query = select(job_attempts).order_by(
            job_attempts.c.launched_unix_s, job_attempts.c.attempt_id
        )
        if job_id is not None:
            query = query.where(job_attempts.c.job_id == job_id)
        if live_only:
            query = query.where(job_attempts.c.state != AttemptState.ENDED.value)
        with self._engine.connect() as conn:
            return [_attempt(r) for r in conn.execute(query)]

    def attempt(self, attempt_id: str) -> AttemptRecord:
        """One attempt by id (:class:`AttemptNotFound` if none)."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(job_attempts).where(job_attempts.c.attempt_id == attempt_id)
            ).first()
        if row is None:
            raise AttemptNotFound(attempt_id)
        return _attempt(row)

    def attempt_by_token(self, launch_token: str) -> AttemptRecord | None:
        """The attempt a launch token belongs to (an instance's tag), or None: an orphan's token."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(job_attempts).where(job_attempts.c.launch_token == launch_token)
            ).first()
        return None if row is None else _attempt(row)

    # --- events ---------------------------------------------------------------------

    def record_event(self, job_id: str, kind: str, data: Mapping[str, Any] | None = None) -> int:
        """Record an event that changes no state (a notice seen, a launch error); returns its seq."""
        with self._engine.begin() as conn:
            if not self._has_job(conn, job_id):
                raise JobNotFound(job_id)
            now = self._clock()
            self._fence(conn, job_id, now)
            return self._event(conn, job_id, now, kind, data or {})

    def events(
        self,
        job_id: str | None = None,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        job_ids: Collection[str] | None = None,
        newest: bool = False,
    ) -> list[JobEvent]:
        """Events with ``seq > after_seq`` in order: one job's, or every job's (``job_id`` None),
        or those of ``job_ids``; with ``limit``, the first that many, or with ``newest`` the last
        (still in order: the dashboard's opening page, chosen by the database, not read whole)."""
        t = job_events
        wanted = None if job_ids is None else set(job_ids)
        query = select(t).where(t.c.seq > after_seq)
        if job_id is not None:
            query = query.where(t.c.job_id == job_id)
        if wanted is not None and len(wanted) <= MAX_IN_IDS:
            query, wanted = query.where(t.c.job_id.in_(sorted(wanted))), None
        query = query.order_by(t.c.seq.desc() if newest else t.c.seq)
        rows: list[JobEvent] = []
        with self._engine.connect() as conn:
            seen_seq: int | None = None
            while True:  # one query, or (a filter too long for a query) page after page
                page = (
                    query
                    if seen_seq is None
                    else query.where(t.c.seq < seen_seq if newest else t.c.seq > seen_seq)
                )
                size = limit if wanted is None else EVENT_PAGE
                got = list(conn.execute(page if size is None else page.limit(size)))
                rows += [
                    JobEvent(r.seq, r.job_id, r.time_unix_s, r.kind, json.loads(r.data))
                    for r in got
                    if wanted is None or r.job_id in wanted
                ]
                if wanted is None or not got or (limit is not None and len(rows) >= limit):
                    break
                seen_seq = got[-1].seq
        rows = rows if limit is None else rows[:limit]
        return rows[::-1] if newest else rows

    def last_event_seq(self) -> int:
        """The newest job event's ``seq`` (0: none yet)."""
        with self._engine.connect() as conn:
            return int(conn.execute(select(func.max(job_events.c.seq))).scalar() or 0)

    # --- cooldowns and cursors ------------------------------------------------------

    def add_cooldown(self, market: MarketId, until_unix_s: float, reason: str) -> Cooldown:
        """Keep ``market`` out of placement until ``until_unix_s`` (a later until extends, an earlier one is kept)."""
        key = {
            "provider": market.provider,
            "region": market.region,
            "zone": market.zone,
            "instance_type": market.instance_type,
        }
        where = [getattr(market_cooldowns.c, k) == v for k, v in key.items()]
        with self._engine.begin() as conn:
            now = self._clock()
            row = conn.execute(select(market_cooldowns).where(*where).with_for_update()).first()
            if row is None:
                conn.execute(
                    insert(market_cooldowns).values(
                        **key, until_unix_s=until_unix_s, reason=reason, created_unix_s=now
                    )
                )
                return Cooldown(market, until_unix_s, reason)
            if until_unix_s > row.until_unix_s or row.until_unix_s <= now:
                conn.execute(
                    update(market_cooldowns)
                    .where(*where)
                    .values(until_unix_s=until_unix_s, reason=reason, created_unix_s=now)
                )
                return Cooldown(market, until_unix_s, reason)
            return Cooldown(market, row.until_unix_s, row.reason)

    def cooldowns(self, now: float | None = None) -> dict[MarketId, Cooldown]:
        """The markets cooling down at ``now`` (default the clock's now)."""
        at = self._clock() if now is None else now
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(market_cooldowns).where(market_cooldowns.c.until_unix_s > at)
            ).all()
        out = {}
        for r in rows:
            market = MarketId(r.provider, r.region, r.zone, r.instance_type)
            out[market] = Cooldown(market, r.until_unix_s, r.reason)
        return out

    def cursor(self, name: str) -> str | None:
        """The position stored under ``name`` (None: never set)."""
        with self._engine.connect() as conn:
            return conn.execute(
                select(controller_cursor.c.position).where(controller_cursor.c.name == name)
            ).scalar_one_or_none()

    def delete_cursor(self, name: str) -> bool:
        """Forget the position stored under ``name`` (a replica's, at its clean stop)."""
        with self._engine.begin() as conn:
            result = conn.execute(
                controller_cursor.delete().where(controller_cursor.c.name == name)
            )
        return bool(result.rowcount)

    def set_cursor(self, name: str, position: str) -> None:
        """Store ``position`` under ``name`` (replacing what was there)."""
        with self._engine.begin() as conn:
            now = self._clock()
            result = conn.execute(
                update(controller_cursor)
                .where(controller_cursor.c.name == name)
                .values(position=position, updated_unix_s=now)
            )
            if result.rowcount == 0:
                conn.execute(
                    insert(controller_cursor).values(
                        name=name, position=position, updated_unix_s=now
                    )
                )

    # --- plumbing -------------------------------------------------------------------

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

    def _write_job(
        self,
        job_id: str,
        event_kind: str,
        data: Mapping[str, Any] | None,
        change: _JobChange,
        expected_version: int | None,
        lease: JobLease | None,
    ) -> JobRecord:
        if lease is None and self._holder is not None:
            lease = self._held(job_id)
        with self._engine.begin() as conn:
            row = conn.execute(
                select(jobs).where(jobs.c.job_id == job_id).with_for_update()
            ).first()
            if row is None:
                raise JobNotFound(job_id)
            if expected_version is not None and row.version != expected_version:
                raise JobChanged(job_id, expected_version, row.version)
            current = JobState(row.state)
            if change.target is not None:
                check_transition(current, change.target, f"job {job_id}")
            now = self._clock()
            values = change.values(row, now)
            # Conditional on what was read: the lease if given, else the version (no write in between).
            if lease is not None:
                result = _leases.fenced_update(conn, (job_id,), lease.token, now, values)
                if result.rowcount == 0:
                    raise self._lost(job_id, lease.token)
            else:
                result = conn.execute(
                    update(jobs)
                    .where(jobs.c.job_id == job_id, jobs.c.version == row.version)
                    .values(values)
                )
                if result.rowcount == 0:
                    found = conn.execute(
                        select(jobs.c.version).where(jobs.c.job_id == job_id)
                    ).scalar_one()
                    raise JobChanged(job_id, row.version, found)
            self._event(conn, job_id, now, event_kind, change.event(current, data))
            written = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).one()
            node_rows = conn.execute(
                select(job_nodes).where(job_nodes.c.job_id == job_id).order_by(job_nodes.c.node)
            ).all()
        return _job(written, node_rows)

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

    @staticmethod
    def _new_attempt_id(conn: Connection) -> str:
        for _ in range(_ID_DRAWS):
            attempt_id = ATTEMPT_ID_PREFIX + secrets.token_hex(ATTEMPT_ID_HEX // 2)
            taken = conn.execute(
                select(func.count())
                .select_from(job_attempts)
                .where(job_attempts.c.attempt_id == attempt_id)
            ).scalar_one()
            if not taken:
                return attempt_id
        raise SpothopError(f"no free attempt id after {_ID_DRAWS} draws")


@dataclass(frozen=True)
class _JobChange:
    """What one write of a jobs row changes: its state (None: stays), reason and counters."""

    target: JobState | None
    reason: str | None
    add_interruptions: int
    add_retries: int
    on_demand_forced: bool | None

    def values(self, row: Row[Any], now: float) -> dict[str, Any]:
        values: dict[str, Any] = {"updated_unix_s": now, "version": row.version + 1}
        if self.target is not None:
            values["state"] = self.target.value
        if self.reason is not None:
            values["reason"] = self.reason
        if self.add_interruptions:
            values["interruptions"] = row.interruptions + self.add_interruptions
        if self.add_retries:
            values["retries_used"] = row.retries_used + self.add_retries
        if self.on_demand_forced is not None:
            values["on_demand_forced"] = self.on_demand_forced
        return values

    def event(self, current: JobState, data: Mapping[str, Any] | None) -> dict[str, Any]:
        event = dict(data or {})
        if self.target is not None:
            event.setdefault("from", current.value)
            event.setdefault("to", self.target.value)
        if self.reason is not None:
            event.setdefault("reason", self.reason)
        return event


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


def _job(row: Row[Any], node_rows: Sequence[Row[Any]]) -> JobRecord:
    return JobRecord(
        job_id=row.job_id,
        name=row.name,
        kind=row.kind,
        spec_json=row.spec_json,
        state=JobState(row.state),
        created_unix_s=row.created_unix_s,
        updated_unix_s=row.updated_unix_s,
        interruptions=row.interruptions,
        retries_used=row.retries_used,
        on_demand_forced=bool(row.on_demand_forced),
        reason=row.reason,
        version=row.version,
        lease_owner=row.lease_owner,
        nodes=tuple(
            NodeRecord(n.job_id, n.node, NodeState(n.state), n.updated_unix_s) for n in node_rows
        ),
    )


def _attempt(row: Row[Any]) -> AttemptRecord:
    values = dict(row._mapping)
    values["state"] = AttemptState(values["state"])
    if values["end_reason"] is not None:
        values["end_reason"] = EndReason(values["end_reason"])
    return AttemptRecord(**values)
