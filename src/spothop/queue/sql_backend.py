"""The SQL shard queue: SQLite for the embedded default, PostgreSQL at scale.

Claims lock their rows with ``SELECT … FOR UPDATE SKIP LOCKED`` on PostgreSQL,
so many workers claim different shards at once without waiting on each other.
SQLite has no row locks: every transaction starts with ``BEGIN IMMEDIATE``
(see :mod:`spothop.db`), which takes the database's write lock first, so a
claim's read-then-write cannot interleave with another's.

Every state change is one transaction whose ``UPDATE`` repeats the fencing
condition (state, token, expiry) in its ``WHERE``: the database, not the
caller, decides whether a lease is still valid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    case,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy import exc as sa_exc

from spothop.db import create_tables_once, make_engine
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

T = TypeVar("T")

metadata = MetaData()

jobs_table = Table(
    "queue_jobs", metadata,
    Column("job", String(200), primary_key=True),
    Column("max_attempts", Integer, nullable=False),
    Column("backoff_base_s", Float, nullable=False),
    Column("backoff_max_s", Float, nullable=False),
    Column("created_at", Float, nullable=False),
)

shards_table = Table(
    "queue_shards", metadata,
    Column("job", String(200), primary_key=True),
    Column("shard_id", String(200), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(8), nullable=False),
    Column("token", Integer, nullable=False, default=0),
    Column("attempts", Integer, nullable=False, default=0),
    Column("failures", Integer, nullable=False, default=0),
    Column("releases", Integer, nullable=False, default=0),
    Column("reclaims", Integer, nullable=False, default=0),
    Column("worker", String(200)),
    # When a pending shard may be claimed (after backoff), or when a lease
    # expires; NULL once done or dead. One column makes "claimable" one range scan.
    Column("available_at", Float),
    Column("lease_s", Float),
    Column("output_ref", Text),
    Column("last_error", Text),
    Index("queue_shards_claimable", "job", "state", "available_at"),
)

# Errors that mean "the connection or the lock, not the request": safe to retry.
TRANSIENT_SQL_ERRORS: tuple[type[BaseException], ...] = (sa_exc.OperationalError, sa_exc.InterfaceError)

ENQUEUE_CHUNK = 500
MAX_ERROR_CHARS = 2000

class SqlQueue(ShardQueue):
    """A job's queue in a SQL database (``sqlite:///…`` or ``postgresql://…``).

    ``schema`` puts the tables in another PostgreSQL schema (tests use a fresh
    one each); the tables are created on first use.
    """

    def __init__(self, job: str, url: str | None = None, *, engine: Engine | None = None,
                 schema: str | None = None, clock: Clock | None = None) -> None:
        super().__init__(job, clock)
        self._owns_engine = engine is None
        base = engine if engine is not None else make_engine(url)
        self._engine = base.execution_options(schema_translate_map={None: schema}) if schema else base
        self._base_engine = base
        self._create_tables(schema)

    # --- plumbing -----------------------------------------------------------------

    def _create_tables(self, schema: str | None) -> None:
        def create() -> None:
            try:
                self._run(lambda conn: metadata.create_all(conn), "create tables")
            except (sa_exc.ProgrammingError, sa_exc.IntegrityError):
                # Another process created them at the same moment: check again.
                self._run(lambda conn: metadata.create_all(conn), "create tables")

        create_tables_once(self._base_engine, metadata, create, schema)

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
        row = conn.execute(select(shards_table).where(
            shards_table.c.job == self.job, shards_table.c.shard_id == shard_id)).first()
        if row is None:
            self._policy(conn)  # UnknownJobError first, if that is the reason
            raise UnknownLeaseError(self.job, shard_id)
        return row

    def _fenced(self, lease: Lease, now: float) -> Any:
        """The WHERE clause that makes a write conditional on the lease being valid."""
        c = shards_table.c
        return ((c.job == self.job) & (c.shard_id == lease.shard_id) & (c.state == ShardState.LEASED.value)
                & (c.token == lease.token) & (c.available_at > now))

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
        return self._run(lambda conn: self._enqueue(conn, checked, policy or QueuePolicy()), "enqueue")

    def _enqueue(self, conn: Connection, checked: list[tuple[str, str]], policy: QueuePolicy) -> int:
        now = self.clock()
        if conn.execute(select(jobs_table.c.job).where(jobs_table.c.job == self.job)).first() is None:
            conn.execute(insert(jobs_table).values(
                job=self.job, max_attempts=policy.max_attempts, backoff_base_s=policy.backoff_base_s,
                backoff_max_s=policy.backoff_max_s, created_at=now))
        c = shards_table.c
        seq = conn.execute(select(func.coalesce(func.max(c.seq), 0)).where(c.job == self.job)).scalar_one()
        added = 0
        for start in range(0, len(checked), ENQUEUE_CHUNK):
            chunk = dict(checked[start:start + ENQUEUE_CHUNK])
            existing = set(conn.execute(select(c.shard_id).where(
                c.job == self.job, c.shard_id.in_(list(chunk)))).scalars())
            rows = []
            for shard_id, payload in chunk.items():
                if shard_id in existing:
                    continue
                seq += 1
                rows.append({"job": self.job, "shard_id": shard_id, "seq": seq, "payload": payload,
                             "state": ShardState.PENDING.value, "token": 0, "attempts": 0, "failures": 0,
                             "releases": 0, "reclaims": 0, "available_at": now})
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
        rows = conn.execute(
            select(c.shard_id, c.payload, c.state, c.token, c.attempts)
            .where(c.job == self.job, c.state.in_([ShardState.PENDING.value, ShardState.LEASED.value]),
                   c.available_at <= now)
            .order_by(c.available_at, c.seq).limit(n)
            .with_for_update(skip_locked=True)
        ).all()
        if not rows:
            self._policy(conn)  # an empty answer for a job that does not exist is an error
            return []
        policy = self._policy(conn)
        expired_last = [r for r in rows if r.state == ShardState.LEASED.value and r.attempts >= policy.max_attempts]
        if expired_last:
            conn.execute(update(shards_table).where(
                c.job == self.job, c.shard_id.in_([r.shard_id for r in expired_last])).values(
                state=ShardState.DEAD.value, available_at=None, worker=None,
                last_error=case((c.last_error.is_(None), "lease expired on the last attempt"), else_=c.last_error)))
        grant = [r for r in rows if r not in expired_last]
        if grant:
            conn.execute(
                update(shards_table).where(c.job == self.job, c.shard_id == bindparam("b_id")).values(
                    state=ShardState.LEASED.value, token=bindparam("b_token"), attempts=bindparam("b_attempts"),
                    reclaims=c.reclaims + bindparam("b_reclaim"), worker=worker,
                    available_at=now + lease_s, lease_s=lease_s),
                [{"b_id": r.shard_id, "b_token": r.token + 1, "b_attempts": r.attempts + 1,
                  "b_reclaim": int(r.state == ShardState.LEASED.value)} for r in grant])
        return [Lease(self.job, r.shard_id, decode_payload(self.job, r.shard_id, r.payload), r.token + 1,
                      worker, now + lease_s, r.attempts + 1) for r in grant]

    def heartbeat(self, lease: Lease, lease_s: float | None = None) -> Lease:
        def body(conn: Connection) -> Lease:
            now = self.clock()
            length = lease_s if lease_s is not None else shards_table.c.lease_s
            done = conn.execute(update(shards_table).where(self._fenced(lease, now)).values(
                available_at=now + length).returning(shards_table.c.available_at)).first()
            if done is None:
                raise self._lost(conn, lease, now)
            return Lease(lease.job, lease.shard_id, lease.payload, lease.token, lease.worker,
                         float(done.available_at), lease.attempt)
        return self._run(body, "heartbeat")

    def complete(self, lease: Lease, output_ref: str) -> Completion:
        def body(conn: Connection) -> Completion:
            now = self.clock()
            changed = conn.execute(update(shards_table).where(self._fenced(lease, now)).values(
                state=ShardState.DONE.value, output_ref=output_ref, available_at=None)).rowcount
            if changed == 1:
                return Completion(lease.shard_id, lease.token, output_ref, first=True)
            row = self._shard_row(conn, lease.shard_id)
            if row.state == ShardState.DONE.value and row.token == lease.token:
                if row.output_ref != output_ref:
                    raise AlreadyCompletedError(self.job, lease.shard_id, row.output_ref, output_ref)
                return Completion(lease.shard_id, lease.token, output_ref, first=False)
            raise self._lost(conn, lease, now)
        return self._run(body, "complete")

    def release(self, lease: Lease) -> None:
        def body(conn: Connection) -> None:
            now = self.clock()
            c = shards_table.c
            changed = conn.execute(update(shards_table).where(self._fenced(lease, now)).values(
                state=ShardState.PENDING.value, attempts=c.attempts - 1, releases=c.releases + 1,
                worker=None, available_at=now)).rowcount
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
            changed = conn.execute(update(shards_table).where(self._fenced(lease, now)).values(
                state=state.value, failures=c.failures + 1, worker=None, last_error=error[:MAX_ERROR_CHARS],
                available_at=None if dead else now + policy.backoff_s(lease.attempt))).rowcount
            if changed != 1:
                raise self._lost(conn, lease, now)
            return state
        return self._run(body, "fail")

    def stats(self) -> QueueStats:
        def body(conn: Connection) -> QueueStats:
            self._policy(conn)
            c = shards_table.c
            rows = conn.execute(select(c.state, func.count(), func.sum(c.attempts), func.sum(c.failures),
                                       func.sum(c.releases), func.sum(c.reclaims))
                                .where(c.job == self.job).group_by(c.state)).all()
            count = {r[0]: int(r[1]) for r in rows}
            total = [sum(int(r[i] or 0) for r in rows) for i in (2, 3, 4, 5)]
            return QueueStats(self.job, count.get("pending", 0), count.get("leased", 0), count.get("done", 0),
                              count.get("dead", 0), *total)
        return self._run(body, "stats")

    def records(self, state: ShardState | None = None) -> list[ShardRecord]:
        def body(conn: Connection) -> list[ShardRecord]:
            self._policy(conn)
            c = shards_table.c
            query = select(shards_table).where(c.job == self.job).order_by(c.seq)
            if state is not None:
                query = query.where(c.state == state.value)
            return [ShardRecord(r.shard_id, decode_payload(self.job, r.shard_id, r.payload), ShardState(r.state),
                                r.token, r.attempts, r.failures, r.releases, r.output_ref, r.last_error,
                                r.worker if r.state == ShardState.LEASED.value else None)
                    for r in conn.execute(query)]
        return self._run(body, "records")

    def get(self, shard_id: str) -> ShardRecord:
        def body(conn: Connection) -> ShardRecord:
            r = self._shard_row(conn, shard_id)
            return ShardRecord(r.shard_id, decode_payload(self.job, r.shard_id, r.payload), ShardState(r.state),
                               r.token, r.attempts, r.failures, r.releases, r.output_ref, r.last_error,
                               r.worker if r.state == ShardState.LEASED.value else None)
        return self._run(body, "get")

    def retry_dead(self, shard_ids: Sequence[str] | None = None) -> int:
        def body(conn: Connection) -> int:
            self._policy(conn)
            c = shards_table.c
            where = (c.job == self.job) & (c.state == ShardState.DEAD.value)
            if shard_ids is not None:
                for shard_id in shard_ids:
                    self._shard_row(conn, shard_id)
                where = where & c.shard_id.in_(list(shard_ids))
            return int(conn.execute(update(shards_table).where(where).values(
                state=ShardState.PENDING.value, attempts=0, available_at=self.clock())).rowcount)
        return self._run(body, "retry dead")

    def drop(self) -> None:
        def body(conn: Connection) -> None:
            conn.execute(delete(shards_table).where(shards_table.c.job == self.job))
            conn.execute(delete(jobs_table).where(jobs_table.c.job == self.job))
        self._run(body, "drop")

    def close(self) -> None:
        if self._owns_engine:
            self._base_engine.dispose()
