"""decide with a deadline: the job's deadline policy chooses the market kind (tables)."""

from __future__ import annotations

import pytest

from spothop.errors import JobSpecError
from spothop.jobs.controller import AttemptView, Terminate, Waiting, decide
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.deadline import deadline_plan, work_left_s
from spothop.jobs.controller.observe import clock_rate
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.records import AttemptRecord
from spothop.market.clock import ManualClock, SimClock
from spothop.providers.extensions import ClockKeeper
from spothop.providers.fake.factories import make_offerings
from spothop.scheduler.market_view import MarketKind, MarketState, MarketView
from spothop.scheduler.policies.base import Kind
from tests.jobs.controller.factories import (
    A100,
    BOOT_S,
    H100,
    NOW,
    PROVIDER,
    REGION,
    ZONES,
    attempt,
    ended,
    job,
    launches,
    market,
    of_type,
    queue,
    snapshot,
    spec,
)

ALL_SPOT_DOWN = [(z, t) for z in ZONES for t in (A100, H100)]


def deadline_job(deadline: str, work: str | float, policy: str, elapsed_s: float = 3600, **fields):  # type: ignore[no-untyped-def]
    s = spec(deadline=deadline, work=work, deadline_policy=policy)
    return job(job_spec=s, created_at=NOW - elapsed_s, **fields)


@pytest.mark.parametrize(
    ("deadline", "work", "policy", "spot_down", "kind"),
    [
        ("20h", "10h", "greedy", False, MarketKind.SPOT),  # slack: spot
        ("20h", "10h", "uniform-progress", False, MarketKind.SPOT),
        ("10h", "9h", "greedy", False, MarketKind.ON_DEMAND),  # no slack left: on-demand
        ("10h", "9h", "uniform-progress", True, MarketKind.ON_DEMAND),
        ("20h", "10h", "on-demand", False, MarketKind.ON_DEMAND),
        ("20h", "10h", "spothop", False, MarketKind.SPOT),
    ],
)
def test_a_pending_deadline_job_launches_in_the_kind_its_policy_chooses(
    deadline: str, work: str, policy: str, spot_down: bool, kind: MarketKind
) -> None:
    j = deadline_job(deadline, work, policy, state=JobState.PENDING)
    view = market(unavailable=ALL_SPOT_DOWN if spot_down else ())
    (launch,) = launches(decide(snapshot([j], view)))
    assert {c.market_kind for c in launch.candidates} == {kind}
    assert f"deadline policy {policy}" in launch.reason


def test_with_slack_and_no_spot_anywhere_greedy_waits() -> None:
    j = deadline_job("20h", "10h", "greedy", state=JobState.PENDING)
    actions = decide(snapshot([j], market(unavailable=ALL_SPOT_DOWN)))
    assert not launches(actions)
    (waiting,) = of_type(actions, Waiting)
    assert "deadline policy greedy: none" in waiting.reason


def test_a_spot_instance_whose_market_vanished_is_replaced_on_demand_make_before_break() -> None:
    spot = attempt()
    # 31700 s left, 32400 s to go: one restart fits, two do not, so greedy leaves spot that is gone.
    j = deadline_job("10h", 35200, "greedy", attempts=[spot])
    actions = decide(snapshot([j], market(unavailable=ALL_SPOT_DOWN)))
    (launch,) = launches(actions)
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND
    assert launch.replaces == spot.attempt_id and "make-before-break" in launch.reason
    assert not of_type(actions, Terminate)  # the spot instance works on until the new one runs


def test_uniform_progress_well_ahead_moves_from_on_demand_to_spot_make_before_break() -> None:
    od = attempt(kind=MarketKind.ON_DEMAND)
    j = deadline_job("20h", "10h", "uniform-progress", attempts=[od])
    (launch,) = launches(decide(snapshot([j])))
    assert launch.candidates[0].market_kind is MarketKind.SPOT
    assert launch.replaces == od.attempt_id


def test_a_running_spot_instance_with_slack_is_kept() -> None:
    j = deadline_job("20h", "10h", "greedy", attempts=[attempt()])
    assert not launches(decide(snapshot([j])))


def test_a_preemption_with_no_slack_left_relaunches_on_demand() -> None:
    lost = ended(EndReason.PREEMPTED, ended_at=NOW - 1000)  # lost before the last tick
    j = deadline_job("10h", "9h", "greedy", attempts=[lost], state=JobState.RECOVERING)
    (launch,) = launches(decide(snapshot([j])))
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND


def test_a_deadline_job_without_a_work_estimate_is_placed_by_its_tolerance() -> None:
    j = job(job_spec=spec(deadline="10h"), state=JobState.PENDING)
    assert deadline_plan(snapshot([j]), j, ControllerConfig()) is None
    (launch,) = launches(decide(snapshot([j])))
    assert "deadline policy" not in launch.reason


def test_the_state_the_policy_sees() -> None:
    j = deadline_job("20h", "10h", "greedy", attempts=[attempt()])
    plan = deadline_plan(snapshot([j]), j, ControllerConfig(restart_overhead_s=90.0))
    assert plan is not None
    s = plan.state
    assert (s.elapsed_s, s.deadline_s, s.restart_overhead_s, s.tick_s) == (3600, 72000, 90, 600)
    assert s.work_left_s == 36000 - 3500  # running since NOW − 3500
    assert s.last.kind is Kind.SPOT and plan.zones[s.last.zone].zone == ZONES[0]
    assert len(s.zones) == len(ZONES) and all(z.available for z in s.zones)
    assert plan.decision.kind is Kind.SPOT


@pytest.mark.parametrize(
    ("fields", "expected_s"),
    [
        ({}, 36000.0),  # nothing ran yet
        (
            {"attempts": [ended(EndReason.PREEMPTED, running_at=NOW - 3000, ended_at=NOW - 1000)]},
            34000.0,
        ),
        ({"attempts": [attempt(n=0), attempt(n=1)]}, 36000.0 - 3500),  # overlap counted once
    ],
)
def test_work_left_of_a_task_job(fields: dict, expected_s: float) -> None:  # type: ignore[type-arg]
    j = deadline_job("20h", "10h", "greedy", **fields)
    assert work_left_s(j, NOW) == pytest.approx(expected_s)


def test_work_left_of_a_batch_job_from_the_seconds_per_shard_observed() -> None:
    s = spec(kind="batch", workers=2, deadline="20h", work="10h")
    runs = [attempt(node=0, n=0), attempt(node=1, n=1)]  # 3500 s and 3499 s of running
    j = job(
        job_spec=s, attempts=runs, shards_enqueued=True, queue=queue(pending=8, leased=2, done=10)
    )
    per_shard = (3500 + 3499) / 10
    assert work_left_s(j, NOW) == pytest.approx(10 * per_shard / 2)
    fresh = j.with_(attempts=(), queue=queue(pending=30, leased=0, done=0))
    assert work_left_s(fresh, NOW) == pytest.approx(36000.0)


@pytest.mark.parametrize("policy", ["optimal", "nope"])
def test_a_deadline_policy_must_be_an_online_one(policy: str) -> None:
    with pytest.raises(JobSpecError, match="deadline_policy"):
        spec(deadline="10h", deadline_policy=policy)


# -- one clock: elapsed and work done both on the controller's (issue: mixed clocks) ------------


def _record(launched: float, running: float | None) -> AttemptRecord:
    return AttemptRecord(
        "a-1", "j-1", 0, "j-1.a0", PROVIDER, REGION, ZONES[0], A100, "spot", 0.9, "i-1",
        AttemptState.RUNNING, launched, running, None, None, None, None, None, None,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("offset_s", "rate", "credited_s"),
    [
        (0.0, 1.0, 500.0),  # the provider bills by the wall
        (7200.0, 1.0, 500.0),  # a skewed provider clock: shifted, spans unchanged
        (50_000.0, 5.0, 100.0),  # an accelerated local world: 500 provider s are 100 of ours
    ],
)
def test_work_done_is_credited_on_the_controllers_clock(
    offset_s: float, rate: float, credited_s: float
) -> None:
    provider_now = NOW + offset_s
    record = _record(provider_now - 560, provider_now - 500)
    view = AttemptView.of(record, None, None, offset_s, rate, NOW)
    assert view.running_at == pytest.approx(NOW - credited_s)
    assert view.launched_at == pytest.approx(NOW - 560 / rate)
    j = deadline_job("20h", "10h", "greedy", elapsed_s=1000, attempts=[view])
    plan = deadline_plan(snapshot([j]), j, ControllerConfig())
    assert plan is not None
    assert plan.state.elapsed_s == 1000
    assert plan.state.work_left_s == pytest.approx(36000 - credited_s)


def test_clock_rate_is_the_provider_clocks_speed() -> None:
    class Sim(ClockKeeper):
        clock = SimClock(5.0, 0.0)

    class Manual(ClockKeeper):
        clock = ManualClock(10.0)

    class NoAbility:  # a clock without the ability's mixin is not the provider's
        clock = SimClock(5.0, 0.0)

    assert (clock_rate(Sim()), clock_rate(Manual()), clock_rate(None)) == (5.0, 1.0, 1.0)
    assert clock_rate(NoAbility()) == 1.0


# -- one zone: a preemption with no slack goes on-demand in the same pass ------------------------


@pytest.mark.parametrize("spot_up", [True, False])
def test_one_zone_preempted_with_no_slack_launches_on_demand_in_that_zone_at_once(
    spot_up: bool,
) -> None:
    offerings = make_offerings(provider=PROVIDER, region=REGION, zones=(ZONES[0],))
    view = MarketView(
        now=NOW,
        offerings=tuple(offerings),
        markets={o.market_id: MarketState(o.market_id, available=spot_up) for o in offerings},
        boot_s={PROVIDER: BOOT_S},
    )
    # Lost within the tick, the zone suspected (noticed and preempted seconds ago).
    lost = ended(EndReason.PREEMPTED, noticed_at=NOW - 20, ended_at=NOW - 10)
    j = deadline_job("10h", "9h", "greedy", attempts=[lost], state=JobState.RECOVERING)
    (launch,) = launches(decide(snapshot([j], view)))
    assert {c.market_kind for c in launch.candidates} == {MarketKind.ON_DEMAND}
    assert {c.market_id.zone for c in launch.candidates} == {ZONES[0]}
