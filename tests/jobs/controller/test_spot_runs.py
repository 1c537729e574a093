"""How long spot has been up or down: the observer's runs, the deadline step's ages, the stop to wait.

The tick model's ``spothop`` reads each zone's (and with several zones, "spot
somewhere"'s) run age; the controller gives it the same from the runs its
observer logged (jobs/controller/spot_runs.py). A wait the policy chooses stops
what runs, as the model's NONE does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from spothop.jobs.controller import EndAttempt, RequestStop, Terminate, decide
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.deadline import deadline_plan
from spothop.jobs.controller.observe import Observer
from spothop.jobs.controller.spot_runs import SpotLog, SpotRuns, age_s, current_run
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.store import JobStore
from spothop.market.clock import ManualClock
from spothop.providers.fake.factories import make_market, make_offering
from spothop.providers.fake.provider import FakeProvider
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.policies.base import IDLE
from spothop.wire.events import Exited
from tests.jobs.controller.factories import (
    A100,
    H100,
    NOW,
    ZONES,
    attempt,
    job,
    market,
    market_id,
    of_type,
    snapshot,
    spec,
)

TICK = 600.0


def test_one_markets_current_run_and_what_came_before() -> None:
    runs = SpotRuns((0.0, 600.0, 1800.0), (True, False, True))
    assert current_run([runs], 2400.0) == (True, 1800.0)
    assert current_run([runs], 1200.0) == (False, 600.0)
    assert current_run([runs], 1800.0) == (True, 1800.0)  # a run starting now is the current one
    assert current_run([runs], 300.0) == (True, 0.0)  # nothing known before the first run
    assert current_run([runs], -1.0) is None and current_run([], 0.0) is None


def test_spot_somewhere_is_the_union_of_the_markets_runs() -> None:
    a = SpotRuns((0.0, 600.0), (True, False))  # up, then down from 600
    b = SpotRuns((0.0, 1200.0), (False, True))  # down, then up from 1200
    assert current_run([a, b], 900.0) == (False, 600.0)  # neither up since 600
    assert current_run([a, b], 1800.0) == (True, 1200.0)
    c = SpotRuns((300.0,), (True,))  # known only from 300: the union's run starts there at most
    assert current_run([a, c], 500.0) == (True, 300.0)


def test_an_age_counts_the_tick_being_decided() -> None:
    assert age_s(1800.0, 2400.0, TICK) == 1200.0  # seen up at 1800 and 2400: two ticks
    assert age_s(None, 2400.0, TICK) == TICK


def test_the_log_starts_a_run_only_where_a_market_changed_and_forgets_old_ones() -> None:
    m = market_id()
    log = SpotLog(keep_s=3600.0)
    for t, up in ((0.0, True), (600.0, True), (1200.0, False), (1800.0, False), (2400.0, True)):
        log.record_states(t, {m: up})
    assert log.runs()[m] == SpotRuns((0.0, 1200.0, 2400.0), (True, False, True))
    log.record_states(9000.0, {m: False})  # the runs that ended over an hour ago are dropped
    assert log.runs()[m] == SpotRuns((2400.0, 9000.0), (True, False))
    first = log.runs()
    log.record_states(9600.0, {m: False})
    assert log.runs() is first  # nothing changed: the same mapping


def test_the_log_reads_a_market_view_as_placement_does() -> None:
    log = SpotLog()
    log.record(NOW, market(unavailable=[(ZONES[0], A100)]))
    runs = log.runs()
    assert runs[market_id(ZONES[0], A100)].ups == (False,)
    assert runs[market_id(ZONES[1], A100)].ups == (True,)


def _deadline_job(**fields):  # type: ignore[no-untyped-def]
    s = spec(deadline="20h", work="10h", deadline_policy="spothop")
    return job(job_spec=s, created_at=NOW - 3600, **fields)


def test_the_policy_sees_how_long_each_zone_and_any_zone_has_been_down() -> None:
    down = [(z, t) for z in ZONES for t in (A100, H100)]
    view = market(unavailable=down)
    runs = {m: SpotRuns((NOW - 7200.0,), (False,)) for m in view.markets}
    runs[market_id(ZONES[1], H100)] = SpotRuns((NOW - 7200.0, NOW - 1800.0), (True, False))
    snap = dataclasses.replace(snapshot([_deadline_job()], view), spot_runs=runs)
    plan = deadline_plan(snap, snap.jobs[0], ControllerConfig(deadline_tick_s=TICK))
    assert plan is not None
    zones = plan.state.zones
    assert [z.down_for_s for z in zones] == [7200.0 + TICK, 1800.0 + TICK, 7200.0 + TICK]
    assert all(z.up_for_s == 0.0 for z in zones)
    any_zone = plan.state.any_zone
    assert any_zone is not None and not any_zone.available
    assert any_zone.down_for_s == 1800.0 + TICK  # spot was somewhere until half an hour ago


def test_without_runs_or_with_runs_that_disagree_the_run_is_one_tick_old() -> None:
    view = market()
    runs = {m: SpotRuns((NOW - 7200.0,), (False,)) for m in view.markets}  # says down; view: up
    for spot_runs in ({}, runs):
        snap = dataclasses.replace(snapshot([_deadline_job()], view), spot_runs=spot_runs)
        plan = deadline_plan(snap, snap.jobs[0], ControllerConfig(deadline_tick_s=TICK))
        assert plan is not None
        assert {z.up_for_s for z in plan.state.zones} == {TICK}


def test_a_wait_the_policy_chooses_stops_what_runs_then_terminates_it_after_the_grace() -> None:
    od = attempt(kind=MarketKind.ON_DEMAND)
    snap = snapshot([_deadline_job(attempts=[od])])
    plan = deadline_plan(snap, snap.jobs[0], ControllerConfig(deadline_tick_s=TICK))
    assert plan is not None
    waiting = dataclasses.replace(plan, decision=IDLE, chose_to_wait=True)
    assert waiting.stops(od) and not plan.stops(od)
    (stop,) = waiting.stop_actions(od, NOW, 30.0)
    assert isinstance(stop, RequestStop) and stop.reason.startswith("stopped to wait")
    asked = od.with_(stop_requested_at=NOW - 10)
    assert waiting.stop_actions(asked, NOW, 30.0) == []
    term, end = waiting.stop_actions(asked, NOW + 60, 30.0)
    assert isinstance(term, Terminate) and isinstance(end, EndAttempt)
    assert end.reason is EndReason.TERMINATED
    booting = od.with_(state=AttemptState.LAUNCHING, running_at=None)
    assert [type(a) for a in waiting.stop_actions(booting, NOW, 30.0)] == [Terminate, EndAttempt]
    noticed = od.with_(state=AttemptState.NOTICED)
    assert not waiting.stops(noticed)


def test_a_worker_that_exits_75_after_the_controllers_stop_ends_terminated_not_preempted() -> None:
    od = attempt(kind=MarketKind.ON_DEMAND, stop_requested_at=NOW - 20)
    j = job(attempts=[od], state=JobState.RUNNING)
    event = Exited(
        instance_id=od.instance_id or "",
        provider=od.provider,
        region=od.region,
        zone=od.zone or "",
        instance_type=od.instance_type,
        job_id=od.job_id,
        time_unix_s=NOW - 5,
        event_id="e-stop",
        code=75,
    )
    ends = of_type(decide(snapshot([j], events=[event])), EndAttempt)
    assert [e.reason for e in ends if e.attempt_id == od.attempt_id] == [EndReason.TERMINATED]


def test_the_observer_logs_each_market_view_it_reads_on_its_own_clock(tmp_path: Path) -> None:
    offering = make_offering(zone="fake-1a")
    spot = make_market(offering, spot_price_usd_per_hour=1.0)
    provider = FakeProvider(markets=[spot], clock=ManualClock(NOW))
    store = JobStore(f"sqlite:///{tmp_path / 'spothop.db'}")
    now = [NOW]
    observer = Observer(store, {"fake": provider}, market_ttl_s=0.0, clock=lambda: now[0])
    try:
        assert observer.snapshot().spot_runs[offering.market_id] == SpotRuns((NOW,), (True,))
        spot.available, now[0] = False, NOW + TICK
        seen = observer.snapshot().spot_runs[offering.market_id]
        assert seen == SpotRuns((NOW, NOW + TICK), (True, False))
    finally:
        store.close()
