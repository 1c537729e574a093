"""Two writers of the same ledger records at once (a controller pass and a report request), on the
real PostgreSQL: no duplicate key, one row per attempt, whole records; a closed record stays."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest
from sqlalchemy import func, select

from spothop.jobs.store import JobStore
from spothop.observe.ledger import Ledger
from spothop.observe.ledger_record import LedgerRecord
from spothop.state.ledger_tables import ledger_records
from tests.conftest import POSTGRES_URL
from tests.observe.test_ledger_close import START, Spec, _ran

WRITERS = 2
ROUNDS = 20
ATTEMPTS = 5


@pytest.fixture
def pg_store(pg_schema: str) -> Iterator[JobStore]:
    separator = "&" if "?" in POSTGRES_URL else "?"
    store = JobStore(f"{POSTGRES_URL}{separator}options=-csearch_path%3D{pg_schema}")
    yield store
    store.engine.dispose()


def _open(record: LedgerRecord, writer: int) -> LedgerRecord:
    """``record`` as writer ``writer`` would price it: still open, its own cost."""
    return replace(record, closed=False, usage_end_unix_s=None, cost_microusd=1000 + writer)


def test_two_writers_at_once_leave_one_whole_row_per_attempt(pg_store: JobStore):
    job_id = pg_store.create_job(Spec())  # type: ignore[arg-type]
    ids = [_ran(pg_store, job_id, START + i * 7200.0, 1.0) for i in range(ATTEMPTS)]
    ledger = Ledger(pg_store, {})
    priced = [ledger.price(pg_store.attempt(a)) for a in ids]
    barrier = threading.Barrier(WRITERS)
    failures: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            for _ in range(ROUNDS):
                barrier.wait(timeout=30)  # both write the same records at the same moment
                ledger._write([_open(r, writer) for r in priced])
        except BaseException as exc:  # the test asserts on it below
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures
    with pg_store.engine.connect() as conn:
        counts = dict(
            conn.execute(
                select(ledger_records.c.attempt_id, func.count()).group_by(
                    ledger_records.c.attempt_id
                )
            ).all()
        )
    assert counts == dict.fromkeys(ids, 1)
    # Each row is one writer's record, whole (not a mix of the two).
    for record, stored in zip(priced, ledger.records(job_id), strict=True):
        assert stored in (_open(record, w) for w in range(WRITERS))

    # The last write wins; a closed record then stays as stored.
    ledger._write([_open(r, 7) for r in priced])
    assert {r.cost_microusd for r in ledger.records(job_id)} == {1007}
    ledger._write(priced)  # closed now
    ledger._write([_open(r, 8) for r in priced])
    assert [r.closed for r in ledger.records(job_id)] == [True] * ATTEMPTS
    assert {r.attempt_id: r for r in ledger.records(job_id)} == {r.attempt_id: r for r in priced}
