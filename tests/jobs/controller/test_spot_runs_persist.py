"""A restarted controller remembers how long spot has been up or down.

The observer's spot log (jobs/controller/spot_runs.py) is kept in the store's
``market_spot_runs`` as it changes and read back when an observer is made. Without
it a controller that restarts in the middle of a long outage reads every market as
one tick old, and ``spothop`` would wait out, again, an outage it had judged too long.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine

from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.deadline import deadline_plan
from spothop.jobs.controller.observe import Observer
from spothop.jobs.controller.spot_runs import SpotLog, SpotRuns, SpotRunTable
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.resources.market_id import MarketId
from spothop.scheduler.policies.base import Kind
from spothop.testing import FakeProvider
from tests.fake_world import fake_store_world

TICK = 600.0
# Spot everywhere for an hour, then gone for four, then back. With 4 h of slack (a 48 h task
# due in 52 h) a fresh outage is waited out and one 30 min old is paid for on-demand
# (docs/simulate.md, rule 1).
UP = [True] * 6 + [False] * 24 + [True] * 6
RESTART_AT = 9  # the pass a controller restarts before: 40 min into the outage


def _decisions(tmp_path: Path, restart_at: int | None, remember: bool = True) -> list[Kind]:
    """The deadline job's decision at each pass, one pass a tick; the controller (its observer)
    made afresh over the same store before pass ``restart_at`` (``remember=False``: with its
    spot log started empty, as before the log was stored)."""
    tmp_path.mkdir()
    _, store, _, provider = fake_store_world(tmp_path, FakeProvider)
    try:
        job_id = store.create_job(
            load_job(
                {"name": "d", "run": "sleep 1e6", "deadline": "52h", "work": "48h"},
                base_dir=tmp_path,
            )
        )
        start = store.get_job(job_id).created_unix_s
        now = [start]
        config = ControllerConfig(deadline_tick_s=TICK)
        observer = _observer(store, provider, lambda: now[0])
        kinds = []
        for i, up in enumerate(UP):
            if i == restart_at:
                observer = _observer(store, provider, lambda: now[0])
                if not remember:
                    observer._spot_log = SpotLog()
            for market in provider.markets:
                market.available = up
            now[0] = start + i * TICK
            snap = observer.snapshot()
            plan = deadline_plan(snap, snap.jobs[0], config)
            assert plan is not None
            kinds.append(plan.decision.kind)
        return kinds
    finally:
        store.close()


def _observer(store: JobStore, provider: FakeProvider, clock: Callable[[], float]) -> Observer:
    return Observer(store, {provider.name: provider}, market_ttl_s=0.0, clock=clock)


def test_a_restarted_controller_decides_as_one_that_never_stopped(tmp_path: Path) -> None:
    steady = _decisions(tmp_path / "steady", restart_at=None)
    restarted = _decisions(tmp_path / "restarted", restart_at=RESTART_AT)
    assert restarted == steady
    assert steady[6:9] == [Kind.NONE, Kind.NONE, Kind.ON_DEMAND]
    # what forgetting did: the outage read one tick old again, and waited out again
    forgot = _decisions(tmp_path / "forgot", restart_at=RESTART_AT, remember=False)
    assert forgot[RESTART_AT] is Kind.NONE


def test_the_stored_log_reads_back_as_it_was_recorded(tmp_path: Path) -> None:
    _, store, _, _ = fake_store_world(tmp_path, FakeProvider)
    try:
        m = MarketId("fake", "r", "z", "t")
        first = SpotLog(keep_s=3600.0, table=SpotRunTable(store.engine))
        for t, up in ((0.0, True), (600.0, True), (1200.0, False), (1800.0, False), (2400.0, True)):
            first.record_states(t, {m: up})
        assert SpotLog(table=SpotRunTable(store.engine)).runs() == first.runs()
        first.record_states(9000.0, {m: False})  # the runs that ended over an hour ago go
        again = SpotLog(table=SpotRunTable(store.engine)).runs()
        assert again[m] == SpotRuns((2400.0, 9000.0), (True, False)) == first.runs()[m]
    finally:
        store.close()


def test_two_controllers_that_saw_one_change_store_one_run(tmp_path: Path) -> None:
    """Replicas log the same markets: a change each saw at its own pass is one run read back."""
    _, store, _, _ = fake_store_world(tmp_path, FakeProvider)
    try:
        m = MarketId("fake", "r", "z", "t")
        a = SpotLog(table=SpotRunTable(store.engine))
        b = SpotLog(table=SpotRunTable(store.engine))
        a.record_states(0.0, {m: True})
        b.record_states(0.0, {m: True})  # the same row: written once
        a.record_states(600.0, {m: False})
        b.record_states(605.0, {m: False})
        assert SpotLog(table=SpotRunTable(store.engine)).runs()[m] == SpotRuns(
            (0.0, 600.0), (True, False)
        )
    finally:
        store.close()


def test_a_write_that_fails_is_kept_and_stored_with_the_next_change(tmp_path: Path) -> None:
    _, store, _, _ = fake_store_world(tmp_path, FakeProvider)
    try:
        m = MarketId("fake", "r", "z", "t")
        broken = SpotRunTable(create_engine(f"sqlite:///{tmp_path / 'missing' / 'no.db'}"))
        log = SpotLog()
        log.table = broken
        log.record_states(0.0, {m: True})  # cannot be stored: the pass goes on from memory
        assert log.runs()[m] == SpotRuns((0.0,), (True,))
        log.table = SpotRunTable(store.engine)
        log.record_states(600.0, {m: False})
        assert SpotLog(table=SpotRunTable(store.engine)).runs()[m] == SpotRuns(
            (0.0, 600.0), (True, False)
        )
    finally:
        store.close()
