"""Controller replicas on real PostgreSQL: jobs spread by claim, renewed leases, fenced writes.

The fake provider stands in for the clouds (no process); the store is a fresh
PostgreSQL schema. The end-to-end test with replica processes, the local
cloud and a SIGKILL is tests/jobs/test_replicas_e2e.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import DBAPIError

from spothop.errors import ConfigError
from spothop.jobs.controller import Launch, decide
from spothop.jobs.controller.loop import Controller
from spothop.jobs.controller.replica import LAPSE_MARGIN_S, HeldJobs, run_replica
from spothop.jobs.errors import JobLeaseLost
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, NodeState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.state.job_tables import job_attempts, job_events, jobs
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.conftest import POSTGRES_URL
from tests.waiting import wait_for

SPEC = {"name": "r", "run": "echo hi", "market": "spot", "tolerance": "aggressive"}


def schema_url(schema: str) -> str:
    """The test server's URL with ``search_path`` set to ``schema`` (every process uses it)."""
    separator = "&" if "?" in POSTGRES_URL else "?"
    return f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_store(pg_schema: str) -> Iterator[JobStore]:
    store = JobStore(schema_url(pg_schema))
    yield store
    store.close()


def _jobs(store: JobStore, n: int) -> list[str]:
    spec = load_job(SPEC)
    return [store.create_job(spec) for _ in range(n)]


def _owner(store: JobStore, job_id: str) -> str | None:
    with store.engine.connect() as conn:
        return conn.execute(select(jobs.c.lease_owner).where(jobs.c.job_id == job_id)).scalar()


def _holds(store: JobStore, job_id: str) -> bool:
    """Whether some controller's lease on the job still holds."""
    import time

    with store.engine.connect() as conn:
        row = conn.execute(
            select(jobs.c.lease_owner, jobs.c.lease_expires_unix_s).where(jobs.c.job_id == job_id)
        ).one()
    return row.lease_owner is not None and (row.lease_expires_unix_s or 0) > time.time()


def test_a_dead_replicas_many_jobs_are_shared_out_among_the_live(pg_store: JobStore) -> None:
    ids = _jobs(pg_store, 32)
    dead = HeldJobs(pg_store, "replica-dead", 0.5, claim_limit=28)
    b = HeldJobs(pg_store, "replica-b", 30, claim_limit=2)
    c = HeldJobs(pg_store, "replica-c", 30, claim_limit=2)
    orphaned = set(dead.tick()[0])
    assert len(orphaned) == 28 and len(b.tick()[0]) == 2 and len(c.tick()[0]) == 2
    wait_for(lambda: not any(_holds(pg_store, j) for j in orphaned), 10, what="the leases to lapse")
    assert pg_store.lease_census("replica-b")[:2] == (28, 1)  # 28 lapsed; c is alive
    # Each takes its share of the lapsed (count over the live holders, itself included) plus its
    # few: not a few a tick, and not all of them.
    assert len(b.tick()[0]) == 14 + 2  # 28 / 2, plus its 2 a tick
    assert len(c.tick()[0]) == 6 + 2  # 12 / 2, plus 2
    b.tick()
    assert set(b.held()) | set(c.held()) == set(ids)
    assert not set(b.held()) & set(c.held())


def test_a_replica_looks_again_just_after_another_holders_lease_would_lapse(
    pg_store: JobStore,
) -> None:
    (job_id,) = _jobs(pg_store, 1)
    dead = HeldJobs(pg_store, "replica-dead", 3)
    survivor = HeldJobs(pg_store, "replica-b", 30)
    assert dead.tick()[0] == [job_id]
    assert survivor.tick()[0] == [] and survivor.next_lapse_unix_s is not None
    expires = dead.lease(job_id).expires_unix_s  # type: ignore[union-attr]
    assert survivor.next_lapse_unix_s == pytest.approx(expires)
    # Not at its next third of a lease (10 s): just after the dead one's lease lapses.
    before = survivor.clock()
    wait = survivor.next_tick_s()
    assert 0 < wait <= expires - before + LAPSE_MARGIN_S < 30 / 3
    wait_for(lambda: not _holds(pg_store, job_id), 10, what="the dead replica's lease to lapse")
    assert survivor.tick()[0] == [job_id]
    # Nothing else held by anyone: back to a third of its lease.
    assert survivor.next_lapse_unix_s is None and survivor.next_tick_s() == 10


def test_a_replica_paused_mid_transaction_loses_its_session_and_its_row_locks(
    pg_store: JobStore, pg_schema: str
) -> None:
    """A holder stopped inside a transaction keeps its job's row locked: every ``SKIP LOCKED``
    claim passes the job by, lease lapsed or not, until the server ends the idle session."""
    (job_id,) = _jobs(pg_store, 1)
    survivor = HeldJobs(pg_store, "replica-b", 30)

    def paused_holder(store: JobStore) -> Connection:
        """The holder's lease, and its connection left inside a transaction holding the row."""
        holder = HeldJobs(store, "replica-paused", 0.3)
        assert holder.tick()[0] == [job_id]
        conn = store.engine.connect()
        conn.begin()
        conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id).with_for_update())
        wait_for(
            lambda: not _holds(pg_store, job_id), 10, what="the paused holder's lease to lapse"
        )
        return conn

    # Without the timeout the lapsed job is never taken while the holder sleeps.
    conn = paused_holder(pg_store)
    assert survivor.tick()[0] == [] and pg_store.lease_census("replica-b").lapsed == 1
    conn.rollback()  # the holder wakes and finishes its transaction
    conn.close()
    assert survivor.tick()[0] == [job_id]
    survivor.release_all()

    # With it (what run_replica sets: half a lease), the server ends the session, locks and all.
    survivor = HeldJobs(pg_store, "replica-c", 30)
    timed = JobStore(schema_url(pg_schema), idle_transaction_timeout_s=0.5)
    try:
        conn = paused_holder(timed)
        wait_for(lambda: survivor.tick()[0] == [job_id], 20, what="the job taken from the sleeper")
        with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):  # woken: refused
            conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id))
        conn.close()
    finally:
        timed.close()


def test_an_idle_transaction_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_transaction_timeout_s must be positive"):
        JobStore(POSTGRES_URL, idle_transaction_timeout_s=0)


def _event_count(store: JobStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(job_events)).scalar_one())


def test_replicas_spread_the_jobs_a_few_at_a_time_and_renew_without_new_tokens(
    pg_store: JobStore,
) -> None:
    ids = _jobs(pg_store, 10)
    a = HeldJobs(pg_store, "replica-a", 30, claim_limit=4)
    b = HeldJobs(pg_store, "replica-b", 30, claim_limit=4)
    gained_a, _ = a.tick()
    gained_b, _ = b.tick()
    assert len(gained_a) == len(gained_b) == 4  # one claim takes a few, not everything
    assert not set(gained_a) & set(gained_b)
    tokens = {j: a.lease(j).token for j in gained_a}  # type: ignore[union-attr]
    more_a, lost_a = a.tick()
    more_b, _ = b.tick()
    assert lost_a == [] and len(more_a) + len(more_b) == 2
    assert set(a.held()) | set(b.held()) == set(ids)
    assert not set(a.held()) & set(b.held())
    # Renewal keeps each token (writes in flight under it still hold) and moves the expiry on.
    assert all(a.lease(j).token == t for j, t in tokens.items())  # type: ignore[union-attr]
    assert {_owner(pg_store, j) for j in a.held()} == {"replica-a"}
    # A clean stop ends every lease at once: the other takes them all at its next tick (its
    # share of a stopped replica's jobs, not a few a tick), however many there are.
    released = a.release_all()
    assert released == len(tokens) + len(more_a) == 10 - len(b.held())
    assert len(b.tick()[0]) == released
    assert set(b.held()) == set(ids)


def test_a_finished_job_with_a_live_attempt_is_still_claimed(pg_store: JobStore) -> None:
    (job_id,) = _jobs(pg_store, 1)
    attempt = pg_store.add_attempt(
        job_id,
        0,
        provider="fake",
        region="r",
        zone="z",
        instance_type="t",
        market_kind="spot",
        price_usd_per_hour=1.0,
    )
    pg_store.transition(job_id, JobState.CANCELLED, "job_cancelled")
    held = HeldJobs(pg_store, "replica-a", 30)
    assert held.tick()[0] == [job_id]  # its instance must still be ended by someone
    pg_store.update_attempt(attempt.attempt_id, state=AttemptState.ENDED, end_reason="cancelled")
    # Nothing left for a controller: the next tick releases it (not "lost"), and claims nothing.
    assert held.tick() == ([], [])
    assert held.held() == {} and held.lost_total == 0
    assert _owner(pg_store, job_id) is None


def test_a_clean_stop_releases_a_finished_job_and_lapses_a_live_one(pg_store: JobStore) -> None:
    done, live = _jobs(pg_store, 2)
    held = HeldJobs(pg_store, "replica-a", 30)
    assert sorted(held.tick()[0]) == sorted([done, live])
    # It ends between two renewals: no tick has released it yet when the replica stops.
    pg_store.transition(done, JobState.CANCELLED, "job_cancelled")
    assert held.release_all() == 2
    assert _owner(pg_store, done) is None  # nothing left for a controller: let go outright
    # Still live: the holder's name stays (the others share it out as a stopped replica's), no
    # lease holds, and another replica takes it at its next tick.
    assert _owner(pg_store, live) == "replica-a" and not _holds(pg_store, live)
    assert pg_store.lease_census("replica-b")[:2] == (1, 0)
    assert HeldJobs(pg_store, "replica-b", 30).tick()[0] == [live]


def test_a_replica_that_lost_its_lease_writes_nothing_and_drops_the_job(
    pg_store: JobStore,
) -> None:
    (job_id,) = _jobs(pg_store, 1)
    a = HeldJobs(pg_store, "replica-a", 0.5)
    b = HeldJobs(pg_store, "replica-b", 30)
    assert a.tick()[0] == [job_id]
    fenced_a = pg_store.fenced(a.lease, on_lost=a.drop)
    fenced_b = pg_store.fenced(b.lease, on_lost=b.drop)
    attempt = fenced_a.add_attempt(
        job_id,
        0,
        provider="fake",
        region="r",
        zone="z",
        instance_type="t",
        market_kind="spot",
        price_usd_per_hour=1.0,
    )
    with pytest.raises(JobLeaseLost, match="holds no lease"):
        fenced_b.record_event(job_id, "not_mine")
    # Replica A pauses past its lease (no renewal): B takes the job.
    wait_for(lambda: b.tick()[0] == [job_id], 10, what="replica B to take the expired job")
    assert _owner(pg_store, job_id) == "replica-b"
    before = _event_count(pg_store)
    version = pg_store.get_job(job_id).version
    # A wakes up and carries on from what it knew: every write is refused, nothing is stored.
    writes: list[tuple[str, Any]] = [
        ("record_event", lambda: fenced_a.record_event(job_id, "stale")),
        ("transition", lambda: fenced_a.transition(job_id, JobState.FAILED, "job_failed")),
        ("update_job", lambda: fenced_a.update_job(job_id, "waiting", reason="stale")),
        (
            "set_node_state",
            lambda: fenced_a.set_node_state(job_id, 0, NodeState.RUNNING, "node_running"),
        ),
        (
            "update_attempt",
            lambda: fenced_a.update_attempt(
                attempt.attempt_id, state=AttemptState.ENDED, end_reason=EndReason.FAILED
            ),
        ),
        (
            "add_attempt",
            lambda: fenced_a.add_attempt(
                job_id,
                0,
                provider="fake",
                region="r",
                zone="z",
                instance_type="t",
                market_kind="spot",
                price_usd_per_hour=1.0,
            ),
        ),
        ("check_lease", lambda: fenced_a.check_lease(job_id)),
    ]
    for name, write in writes:
        with pytest.raises(JobLeaseLost):
            write()
        assert a.lease(job_id) is None, f"{name}: the job is dropped at the first refusal"
    assert _event_count(pg_store) == before
    record = pg_store.get_job(job_id)
    assert (record.state, record.version) == (JobState.PENDING, version)
    assert pg_store.attempt(attempt.attempt_id).state is AttemptState.LAUNCHING
    assert len(pg_store.attempts(job_id)) == 1
    # B, holding it, writes.
    fenced_b.record_event(job_id, "mine")
    assert a.tick() == ([], [])  # A's next tick claims nothing (B holds it) and has nothing to lose


def test_a_paused_replica_carries_out_a_stale_pass_and_nothing_happens(
    pg_store: JobStore, tmp_path: Path
) -> None:
    """A whole pass: A observes and decides a launch, pauses past its lease, B takes the job,
    A executes: no attempt row, no cloud call, no event; B's pass launches."""
    (job_id,) = _jobs(pg_store, 1)
    clock = ManualClock()
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=clock)
    providers = {provider.name: provider}
    url = "postgresql://unused"  # the store tag only (the store object is given)
    a = HeldJobs(pg_store, "replica-a", 0.5)
    b = HeldJobs(pg_store, "replica-b", 30)
    ctl_a = Controller(pg_store, providers, store_url=url, home=tmp_path, leases=a)
    ctl_b = Controller(pg_store, providers, store_url=url, home=tmp_path, leases=b)
    try:
        assert a.tick()[0] == [job_id]
        snapshot = ctl_a.observer.snapshot()
        assert [j.job_id for j in snapshot.jobs] == [job_id]
        actions = decide(snapshot)
        assert any(isinstance(x, Launch) for x in actions)
        wait_for(lambda: b.tick()[0] == [job_id], 10, what="replica B to take the job")
        before = _event_count(pg_store)
        reports = ctl_a.executor.execute(actions)
        wait_for(lambda: not ctl_a.executor.launching(), 10, what="A's launches to end")
        assert provider.requests == []  # no cloud call: the attempt row (fenced) came first
        assert pg_store.attempts(job_id) == []
        assert _event_count(pg_store) == before
        assert all(not r.ok and "JobLeaseLost" in (r.error or "") for r in reports), reports
        assert a.held() == {}
        # A's next pass sees no job at all; B's launches it.
        ctl_a.run_pass()
        assert ctl_a.observer.last is not None and ctl_a.observer.last.jobs == ()
        ctl_b.run_pass()
        wait_for(lambda: not ctl_b.executor.launching(), 10, what="B's launch to end")
        assert len(provider.requests) == 1
        (attempt,) = pg_store.attempts(job_id)
        assert attempt.instance_id is not None
    finally:
        ctl_a.close()
        ctl_b.close()


def test_each_replica_sees_only_its_own_jobs_and_instances(
    pg_store: JobStore, tmp_path: Path
) -> None:
    first, second = _jobs(pg_store, 2)
    clock = ManualClock()
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=clock)
    providers = {provider.name: provider}
    a = HeldJobs(pg_store, "replica-a", 30, claim_limit=1)
    b = HeldJobs(pg_store, "replica-b", 30, claim_limit=1)
    ctl_a = Controller(pg_store, providers, store_url="x", home=tmp_path, leases=a)
    ctl_b = Controller(pg_store, providers, store_url="x", home=tmp_path, leases=b)
    try:
        a.tick()
        b.tick()
        assert set(a.held()) == {first} and set(b.held()) == {second}
        for ctl in (ctl_a, ctl_b):
            ctl.run_pass()
            wait_for(lambda c=ctl: not c.executor.launching(), 10, what="the launch")
        clock.advance(3600)  # past every grace period: an unknown instance would be an orphan
        for _ in range(2):
            for ctl in (ctl_a, ctl_b):
                ctl.run_pass()
        alive = [i for i in provider.list_instances() if i.state.is_alive]
        assert sorted(i.tags["spothop-job"] for i in alive) == sorted([first, second])
        last_a = ctl_a.observer.last
        assert last_a is not None
        assert {i.tags["spothop-job"] for i in last_a.instances.values()} == {first}
        assert [j.job_id for j in last_a.jobs] == [first]
    finally:
        ctl_a.close()
        ctl_b.close()


def test_run_replica_on_sqlite_runs_a_job_and_releases_its_lease_on_stop(
    tmp_path: Path,
) -> None:
    """A single replica on SQLite (its write lock serialises claims): launches, then a clean stop."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    (job_id,) = _jobs(store, 1)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()])
    stop = threading.Event()
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run_replica(
                url,
                owner="solo",
                lease_s=3,
                providers={provider.name: provider},
                stop_event=stop,
                period_s=0.2,
                home=tmp_path,
            )
        ),
        daemon=True,
    )
    thread.start()
    try:
        wait_for(lambda: _owner(store, job_id) == "solo", 10, what="the replica's claim")
        wait_for(lambda: store.attempts(job_id), 10, what="the replica's launch")
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    (stats,) = result
    assert stats.released == 1 and stats.passes >= 1
    assert not _holds(store, job_id)  # its lease ended at the stop: anyone may take the job
    assert store.cursor("agent_events@solo") is None  # its own cursor is removed at a clean stop
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(job_attempts)).scalar_one() >= 1
    store.close()


def test_a_replica_id_too_long_is_a_config_error(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'store.db'}")
    with pytest.raises(ConfigError, match="replica id"):
        HeldJobs(store, "x" * 129, 3)
    store.close()
