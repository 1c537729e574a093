"""The SQL shard queue: SQLite for the embedded default, PostgreSQL at scale.

A shard's lease is a fenced lease of :mod:`spothop.state.leases` on its row of
``queue_shards`` (:mod:`spothop.state.queue_tables`): claims lock their rows with
``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL, so many workers claim
different shards at once without waiting on each other, and under SQLite's
``BEGIN IMMEDIATE`` write lock; every later state change is one transaction
whose ``UPDATE`` repeats the fencing condition (state, token, expiry) in its
``WHERE``: the database, not the caller, decides whether a lease is still valid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    case,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy import exc as sa_exc

from spothop.db import make_engine
from spothop.queue.base import Clock, ShardQueue, lease_ms
from spothop.queue.errors import (
    AlreadyCompletedError,
    LeaseLost,
    UnknownJobError,
    UnknownLeaseError,
)
from spothop.queue.model import (
    DEFAULT_LEASE_S,
    Completion,
    Lease,
    QueuePolicy,
    QueueStats,
    Shard,
    ShardRecord,
    ShardState,
    check_shard,
    decode_payload,
)
from spothop.queue.retry import with_retry
from spothop.state.leases import Leases
from spothop.state.migrate import ensure_schema
from spothop.state.queue_tables import jobs_table, shards_table

T = TypeVar("T")

# Errors that mean "the connection or the lock, not the request": safe to retry.
TRANSIENT_SQL_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
)

ENQUEUE_CHUNK = 500
MAX_ERROR_CHARS = 2000

# ``available_at`` is the lease's expiry while a shard is leased (and its backoff while pending).
_LEASES = Leases(
    shards_table,
    key=(shards_table.c.job, shards_table.c.shard_id),
    token=shards_table.c.token,
    expires=shards_table.c.available_at,
    held=shards_table.c.state == ShardState.LEASED.value,
)


class SqlQueue(ShardQueue):
    """A job's queue in a SQL database (``sqlite:///…`` or ``postgresql://…``).

    ``schema`` puts the tables in another PostgreSQL schema (tests use a fresh
    one each). Opening a queue brings the store's schema up to date
    (:func:`spothop.state.ensure_schema`, once per engine per process).
    """

    def __init__(
        self,
        job: str,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        schema: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(job, clock)
        self._owns_engine = engine is None
        base = engine if engine is not None else make_engine(url)
        self._engine = (
            base.execution_options(schema_translate_map={None: schema}) if schema else base
        )
        self._base_engine = base
        # One transaction, so safe to repeat through a lost connection like every queue operation.
        with_retry(
            lambda: ensure_schema(base, schema),
            TRANSIENT_SQL_ERRORS,
            f"queue {job!r}: open the store",
        )

    # --- plumbing -----------------------------------------------------------------

    def _run(self, body: Callable[[Connection], T], what: str) -> T:
        def once() -> T:
            with self._engine.begin() as conn:
                return body(conn)

        return with_retry(once, TRANSIENT_SQL_ERRORS, f"queue {self.job!r}: {what}")

    def _policy(self, conn: Connection) -> QueuePolicy:
        row = conn.execute(select(jobs_table).where(jobs_table.c.job == self.job)).first()
        if row is None:
            raise UnknownJobError(self.job)
        return QueuePolicy(row.max_attempts, row.backoff_base_s, row.backoff_max_s)

    def _shard_row(self, conn: Connection, shard_id: str) -> Any:
        row = conn.execute(
            select(shards_table).where(
                shards_table.c.job == self.job, shards_table.c.shard_id == shard_id
            )
        ).first()
        if row is None:
            self._policy(conn)  # UnknownJobError first, if that is the reason
            raise UnknownLeaseError(self.job, shard_id)
        return row

    def _fenced_update(
        self,
        conn: Connection,
        lease: Lease,
        now: float,
        values: dict[str, Any],
        returning: tuple[Any, ...] = (),
    ) -> Any:
        """Write ``values`` into the lease's row only while the lease is valid (see :mod:`spothop.state.leases`)."""
        return _LEASES.fenced_update(
            conn, (self.job, lease.shard_id), lease.token, now, values, returning
        )

    def _lost(self, conn: Connection, lease: Lease, now: float) -> LeaseLost:
        row = self._shard_row(conn, lease.shard_id)
        if row.token != lease.token:
            why = f"the shard was claimed again since (token {row.token})"
        elif row.state != ShardState.LEASED.value:
            why = f"the shard is {row.state} now"
        else:
            why = f"it expired {now - row.available_at:.1f}s ago"
        return LeaseLost(self.job, lease.shard_id, lease.token, why)

    # --- the contract ---------------------------------------------------------------

    def enqueue(self, shards: Iterable[Shard], policy: QueuePolicy | None = None) -> int:
        checked = [(s.id, check_shard(s)) for s in shards]
        return self._run(
            lambda conn: self._enqueue(conn, checked, policy or QueuePolicy()), "enqueue"
        )

    def _enqueue(
        self, conn: Connection, checked: list[tuple[str, str]], policy: QueuePolicy
    ) -> int:
        now = self.clock()
        if (
            conn.execute(select(jobs_table.c.job).where(jobs_table.c.job == self.job)).first()
            is None
        ):
            conn.execute(
                insert(jobs_table).values(
                    job=self.job,
                    max_attempts=policy.max_attempts,
                    backoff_base_s=policy.backoff_base_s,
                    backoff_max_s=policy.backoff_max_s,
                    created_at=now,
                )
            )
        c = shards_table.c
        seq = conn.execute(
            select(func.coalesce(func.max(c.seq), 0)).where(c.job == self.job)
        ).scalar_one()
        added = 0
        for start in range(0, len(checked), ENQUEUE_CHUNK):
            chunk = dict(checked[start : start + ENQUEUE_CHUNK])
            existing = set(
                conn.execute(
                    select(c.shard_id).where(c.job == self.job, c.shard_id.in_(list(chunk)))
                ).scalars()
            )
            rows = []
            for shard_id, payload in chunk.items():
                if shard_id in existing:
                    continue
                seq += 1
                rows.append(
                    {
                        "job": self.job,
                        "shard_id": shard_id,
                        "seq": seq,
                        "payload": payload,
                        "state": ShardState.PENDING.value,
                        "token": 0,
                        "attempts": 0,
                        "failures": 0,
                        "releases": 0,
                        "reclaims": 0,
                        "available_at": now,
                    }
                )
            if rows:
                conn.execute(insert(shards_table), rows)
            added += len(rows)
        return added

    def claim(self, worker: str, n: int = 1, lease_s: float = DEFAULT_LEASE_S) -> list[Lease]:
        lease_ms(lease_s)
        return self._run(lambda conn: self._claim(conn, worker, n, lease_s), "claim")

    def _claim(self, conn: Connection, worker: str, n: int, lease_s: float) -> list[Lease]:
        now = self.clock()
        c = shards_table.c
        rows = _LEASES.lock(
            conn,
            [c.payload, c.state, c.attempts, c.reclaims],
            where=(c.job == self.job)
            & c.state.in_([ShardState.PENDING.value, ShardState.LEASED.value])
            & (c.available_at <= now),
            order_by=[c.available_at, c.seq],
            limit=n,
        )
        if not rows:
            self._policy(conn)  # an empty answer for a job that does not exist is an error
            return []
        policy = self._policy(conn)
        expired_last = [
            r
            for r in rows
            if r.state == ShardState.LEASED.value and r.attempts >= policy.max_attempts
        ]
        if expired_last:
            conn.execute(
                update(shards_table)
                .where(c.job == self.job, c.shard_id.in_([r.shard_id for r in expired_last]))
                .values(
                    state=ShardState.DEAD.value,
                    available_at=None,
                    worker=None,
                    last_error=case(
                        (c.last_error.is_(None), "lease expired on the last attempt"),
                        else_=c.last_error,
                    ),
                )
            )
        grant = [r for r in rows if r not in expired_last]
        tokens = _LEASES.grant(
            conn,
            grant,
            now + lease_s,
            {"state": ShardState.LEASED.value, "worker": worker, "lease_s": lease_s},
            lambda r: {
                "attempts": r.attempts + 1,
                "reclaims": r.reclaims + int(r.state == ShardState.LEASED.value),
            },
        )
        return [
            Lease(
                self.job,
                r.shard_id,
                decode_payload(self.job, r.shard_id, r.payload),
                token,
                worker,
                now + lease_s,
                r.attempts + 1,
            )
            for r, token in zip(grant, tokens, strict=True)
        ]

    def heartbeat(self, lease: Lease, lease_s: float | None = None) -> Lease:
        def body(conn: Connection) -> Lease:
            now = self.clock()
            length = lease_s if lease_s is not None else shards_table.c.lease_s
            done = self._fenced_update(
                conn, lease, now, {"available_at": now + length}, (shards_table.c.available_at,)
            ).first()
            if done is None:
                raise self._lost(conn, lease, now)
            return Lease(
                lease.job,
                lease.shard_id,
                lease.payload,
                lease.token,
                lease.worker,
                float(done.available_at),
                lease.attempt,
            )

        return self._run(body, "heartbeat")

    def complete(self, lease: Lease, output_ref: str) -> Completion:
        def body(conn: Connection) -> Completion:
            now = self.clock()
            changed = self._fenced_update(
                conn,
                lease,
                now,
                {"state": ShardState.DONE.value, "output_ref": output_ref, "available_at": None},
            ).rowcount
            if changed == 1:
                return Completion(lease.shard_id, lease.token, output_ref, first=True)
            row = self._shard_row(conn, lease.shard_id)
            if row.state == ShardState.DONE.value and row.token == lease.token:
                if row.output_ref != output_ref:
                    raise AlreadyCompletedError(
                        self.job, lease.shard_id, row.output_ref, output_ref
                    )
                return Completion(lease.shard_id, lease.token, output_ref, first=False)
            raise self._lost(conn, lease, now)

        return self._run(body, "complete")

    def release(self, lease: Lease) -> None:
        def body(conn: Connection) -> None:
            now = self.clock()
            c = shards_table.c
            changed = self._fenced_update(
                conn,
                lease,
                now,
                {
                    "state": ShardState.PENDING.value,
                    "attempts": c.attempts - 1,
                    "releases": c.releases + 1,
                    "worker": None,
                    "available_at": now,
                },
            ).rowcount
            if changed != 1:
                raise self._lost(conn, lease, now)

        self._run(body, "release")

    def fail(self, lease: Lease, error: str) -> ShardState:
        def body(conn: Connection) -> ShardState:
            now = self.clock()
            policy = self._policy(conn)
            c = shards_table.c
            dead = lease.attempt >= policy.max_attempts
            state = ShardState.DEAD if dead else ShardState.PENDING
            changed = self._fenced_update(
                conn,
                lease,
                now,
                {
                    "state": state.value,
                    "failures": c.failures + 1,
                    "worker": None,
                    "last_error": error[:MAX_ERROR_CHARS],
                    "available_at": None if dead else now + policy.backoff_s(lease.attempt),
                },
            ).rowcount
            if changed != 1:
                raise self._lost(conn, lease, now)
            return state

        return self._run(body, "fail")

    def stats(self) -> QueueStats:
        def body(conn: Connection) -> QueueStats:
            self._policy(conn)
            c = shards_table.c
            rows = conn.execute(
                select(
                    c.state,
                    func.count(),
                    func.sum(c.attempts),
                    func.sum(c.failures),
                    func.sum(c.releases),
                    func.sum(c.reclaims),
                )
                .where(c.job == self.job)
                .group_by(c.state)
            ).all()
            count = {r[0]: int(r[1]) for r in rows}
            total = [sum(int(r[i] or 0) for r in rows) for i in (2, 3, 4, 5)]
            return QueueStats(
                self.job,
                count.get("pending", 0),
                count.get("leased", 0),
                count.get("done", 0),
                count.get("dead", 0),
                *total,
            )

        return self._run(body, "stats")

    def records(self, state: ShardState | None = None) -> list[ShardRecord]:
        def body(conn: Connection) -> list[ShardRecord]:
            self._policy(conn)
            c = shards_table.c
            query = select(shards_table).where(c.job == self.job).order_by(c.seq)
            if state is not None:
                query = query.where(c.state == state.value)
            return [self._record(r) for r in conn.execute(query)]

        return self._run(body, "records")

    def get(self, shard_id: str) -> ShardRecord:
        def body(conn: Connection) -> ShardRecord:
            return self._record(self._shard_row(conn, shard_id))

        return self._run(body, "get")

    def _record(self, r: Any) -> ShardRecord:
        """A shard row as the library's record; the worker is named only while it holds a lease."""
        return ShardRecord(
            r.shard_id,
            decode_payload(self.job, r.shard_id, r.payload),
            ShardState(r.state),
            r.token,
            r.attempts,
            r.failures,
            r.releases,
            r.output_ref,
            r.last_error,
            r.worker if r.state == ShardState.LEASED.value else None,
        )

    def retry_dead(self, shard_ids: Sequence[str] | None = None) -> int:
        def body(conn: Connection) -> int:
            self._policy(conn)
            c = shards_table.c
            where = (c.job == self.job) & (c.state == ShardState.DEAD.value)
            if shard_ids is not None:
                for shard_id in shard_ids:
                    self._shard_row(conn, shard_id)
                where = where & c.shard_id.in_(list(shard_ids))
            return int(
                conn.execute(
                    update(shards_table)
                    .where(where)
                    .values(state=ShardState.PENDING.value, attempts=0, available_at=self.clock())
                ).rowcount
            )

        return self._run(body, "retry dead")

    def drop(self) -> None:
        def body(conn: Connection) -> None:
            conn.execute(delete(shards_table).where(shards_table.c.job == self.job))
            conn.execute(delete(jobs_table).where(jobs_table.c.job == self.job))

        self._run(body, "drop")

    def close(self) -> None:
        if self._owns_engine:
            self._base_engine.dispose()
