"""decide after a notice or a loss: cooldowns, make-before-break, tolerance, outages, blindness."""

from __future__ import annotations

import dataclasses

import pytest

from spothop.jobs.controller import (
    CoolDown,
    EndAttempt,
    ForceOnDemand,
    RequestCheckpoint,
    RequestStop,
    SetJobState,
    Terminate,
    UpdateAttempt,
    Waiting,
    decide,
)
from spothop.jobs.controller.config import COOLDOWN_S, ControllerConfig
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.providers.base import InstanceState
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.tolerance import BALANCED_WINDOW_S
from spothop.wire.events import AdvanceNotice, FinalNotice, NoticeBlind, SelfCheckEvent
from tests.jobs.controller.factories import (
    A100,
    H100,
    NOW,
    PROVIDER,
    REGION,
    ZONES,
    attempt,
    ended,
    instance_of,
    job,
    launches,
    market,
    market_id,
    of_type,
    snapshot,
    spec,
    stamp,
)

EVERY_SPOT = [(z, t) for z in ZONES for t in (H100, A100)]


def _best_spot_market() -> MarketId:
    return market_id(ZONES[0], H100)


def test_a_final_notice_ends_the_attempt_cools_its_market_and_relaunches_elsewhere() -> None:
    old = attempt(zone=ZONES[0], instance_type=H100)
    notice = FinalNotice(**stamp(old), cause="spot", deadline_unix_s=NOW + 30, lead_time_s=35)
    actions = decide(snapshot([job(attempts=[old])], events=[notice]))
    update = of_type(actions, UpdateAttempt)[0]
    assert update.state is AttemptState.NOTICED and update.fields["notice_final"] is True
    end = of_type(actions, EndAttempt)[0]
    assert end.attempt_id == old.attempt_id and end.reason is EndReason.PREEMPTED
    cool = of_type(actions, CoolDown)[0]
    assert cool.market == old.market and cool.until_s == pytest.approx(NOW - 5 + COOLDOWN_S)
    (launch,) = launches(actions)
    assert old.market not in [c.market_id for c in launch.candidates]
    assert launch.replaces is None and "recovering node 0" in launch.reason
    assert of_type(actions, SetJobState)[-1].state is JobState.RECOVERING
    # The instance is left to the cloud: its emergency checkpoint may still be uploading.
    assert not of_type(actions, Terminate)


def test_a_cooldown_already_stored_is_not_asked_again_and_keeps_the_market_off() -> None:
    old = ended(EndReason.PREEMPTED, zone=ZONES[0], instance_type=H100, noticed_at=NOW - 60)
    cooled = {old.market: NOW - 60 + COOLDOWN_S}
    world = snapshot([job(state=JobState.RECOVERING, attempts=[old])], cooldowns=cooled)
    actions = decide(world)
    assert not of_type(actions, CoolDown)
    (launch,) = launches(actions)
    assert launch.candidates[0].market_id != old.market


def test_a_cooldown_that_expired_lets_the_market_back() -> None:
    old = ended(
        EndReason.PREEMPTED, zone=ZONES[0], instance_type=H100, ended_at=NOW - 2 * COOLDOWN_S
    )
    world = snapshot(
        [job(state=JobState.RECOVERING, attempts=[old])], cooldowns={old.market: NOW - 1}
    )
    (launch,) = launches(decide(world))
    assert launch.candidates[0].market_id == _best_spot_market()


def test_an_advance_notice_starts_a_replacement_before_the_old_instance_dies() -> None:
    old = attempt(zone=ZONES[0], instance_type=H100)
    notice = AdvanceNotice(**stamp(old), cause="rebalance")
    actions = decide(snapshot([job(attempts=[old])], events=[notice]))
    update = of_type(actions, UpdateAttempt)[0]
    assert update.state is AttemptState.NOTICED and "notice_final" not in update.fields
    assert not of_type(actions, EndAttempt)
    (launch,) = launches(actions)
    assert launch.replaces == old.attempt_id and "make-before-break" in launch.reason
    assert launch.candidates[0].market_id != old.market
    assert of_type(actions, CoolDown)[0].market == old.market
    # The old instance still works: the job is not recovering.
    assert not of_type(actions, SetJobState)


def test_a_final_notice_with_more_lead_than_a_boot_is_made_before_broken() -> None:
    old = attempt(zone=ZONES[0], instance_type=H100)
    notice = FinalNotice(**stamp(old), cause="spot", deadline_unix_s=NOW + 600, lead_time_s=605)
    actions = decide(snapshot([job(attempts=[old])], events=[notice]))
    assert not of_type(actions, EndAttempt)
    (launch,) = launches(actions)
    assert launch.replaces == old.attempt_id


def test_the_replacement_running_asks_the_old_instance_to_stop_then_terminates_it() -> None:
    old = attempt(n=0, state=AttemptState.NOTICED, noticed_at=NOW - 120)
    new = attempt(n=1, zone=ZONES[1], state=AttemptState.RUNNING, running_at=NOW - 10)
    actions = decide(snapshot([job(attempts=[old, new])]))
    assert of_type(actions, RequestStop) == [
        RequestStop("j-1", old.instance_id or "", f"its replacement {new.attempt_id} runs")
    ]
    asked = old.with_(stop_requested_at=NOW - 30)
    assert not of_type(decide(snapshot([job(attempts=[asked, new])])), RequestStop)
    late = old.with_(stop_requested_at=NOW - 3600)
    actions = decide(snapshot([job(attempts=[late, new])]))
    assert of_type(actions, Terminate)[0].instance_id == old.instance_id
    assert of_type(actions, EndAttempt)[0].reason is EndReason.SUPERSEDED


def test_the_old_instance_exiting_75_after_the_handover_is_superseded_and_terminated() -> None:
    from spothop.wire.events import Exited

    old = attempt(n=0, state=AttemptState.NOTICED, noticed_at=NOW - 120, stop_requested_at=NOW - 20)
    new = attempt(n=1, zone=ZONES[1], state=AttemptState.RUNNING, running_at=NOW - 10)
    actions = decide(snapshot([job(attempts=[old, new])], events=[Exited(**stamp(old), code=75)]))
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.SUPERSEDED and end.exit_code == 75
    assert of_type(actions, Terminate)[0].instance_id == old.instance_id
    assert not launches(actions)


# -- tolerance ------------------------------------------------------------------------------


def _recovering(tolerance: str, interruptions: int = 1, **spec_fields: object):  # type: ignore[no-untyped-def]
    lost = [
        ended(
            EndReason.PREEMPTED,
            n=i,
            zone=ZONES[i % 3],
            instance_type=A100,
            noticed_at=NOW - 60 * (interruptions - i),
            ended_at=NOW - 60 * (interruptions - i) + 30,
        )
        for i in range(interruptions)
    ]
    return job(
        state=JobState.RECOVERING, attempts=lost, job_spec=spec(tolerance=tolerance, **spec_fields)
    )


def test_aggressive_never_uses_on_demand_it_waits() -> None:
    view = market(unavailable=EVERY_SPOT)
    actions = decide(snapshot([_recovering("aggressive", 5)], view))
    assert not launches(actions)
    assert "on-demand is never used" in of_type(actions, Waiting)[0].reason


@pytest.mark.parametrize("tolerance", ["balanced", "conservative"])
def test_without_spot_capacity_balanced_and_conservative_go_on_demand(tolerance: str) -> None:
    view = market(unavailable=EVERY_SPOT)
    (launch,) = launches(decide(snapshot([_recovering(tolerance)], view)))
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND


def test_balanced_moves_to_on_demand_after_three_interruptions_within_the_window() -> None:
    (two,) = launches(decide(snapshot([_recovering("balanced", 2)])))
    assert two.candidates[0].market_kind is MarketKind.SPOT
    (three,) = launches(decide(snapshot([_recovering("balanced", 3)])))
    assert three.candidates[0].market_kind is MarketKind.ON_DEMAND
    assert "3 interruptions within" in three.reason
    # Once the window has emptied, spot again.
    later = snapshot([_recovering("balanced", 3)], now=NOW + BALANCED_WINDOW_S + 600)
    (after,) = launches(decide(later))
    assert after.candidates[0].market_kind is MarketKind.SPOT


def test_balanced_goes_on_demand_when_spot_does_not_save_the_margin() -> None:
    stormy = {
        (z, t): 40.0 for z, t in EVERY_SPOT
    }  # goodput collapses: spot costs more per useful hour
    (launch,) = launches(decide(snapshot([_recovering("balanced")], market(rates=stormy))))
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND
    assert "does not save" in launch.reason


def test_conservative_uses_only_calm_spot_markets() -> None:
    rates = {(z, t): 0.5 for z, t in EVERY_SPOT}
    rates[(ZONES[2], A100)] = 0.01
    (calm,) = launches(decide(snapshot([_recovering("conservative")], market(rates=rates))))
    assert calm.candidates[0].market_id == market_id(ZONES[2], A100)
    rates[(ZONES[2], A100)] = 0.5
    (none_calm,) = launches(decide(snapshot([_recovering("conservative")], market(rates=rates))))
    assert none_calm.candidates[0].market_kind is MarketKind.ON_DEMAND


def test_market_on_demand_never_asks_for_spot() -> None:
    pending = job(state=JobState.PENDING, job_spec=spec(market="on-demand", tolerance="aggressive"))
    (launch,) = launches(decide(snapshot([pending])))
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND


# -- max_interruptions -----------------------------------------------------------------------


def test_max_interruptions_reached_forces_on_demand_with_the_reason() -> None:
    j = _recovering("aggressive", 2, max_interruptions=2)
    actions = decide(snapshot([j]))
    (force,) = of_type(actions, ForceOnDemand)
    assert "max_interruptions (2) reached" in force.reason
    (launch,) = launches(actions)
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND
    # Recorded once: a job already forced is not forced again, and stays on on-demand.
    again = decide(snapshot([j.with_(on_demand_forced=True)]))
    assert not of_type(again, ForceOnDemand)
    assert launches(again)[0].candidates[0].market_kind is MarketKind.ON_DEMAND


def test_max_interruptions_reached_fails_the_job_when_the_spec_says_fail() -> None:
    j = _recovering("balanced", 2, max_interruptions=2, on_max_interruptions="fail")
    actions = decide(snapshot([j]))
    assert not launches(actions)
    (state,) = of_type(actions, SetJobState)
    assert state.state is JobState.FAILED and "max_interruptions (2) reached" in state.reason


# -- recovering before new, zone outages -------------------------------------------------------


def test_recovering_jobs_are_placed_before_new_ones_and_get_the_reserved_pool() -> None:
    pool = {"provider": PROVIDER, "instance_type": A100, "zone": ZONES[1], "count": 1}
    shared = spec(reserved=[pool])
    fresh = job("j-0", state=JobState.PENDING, job_spec=shared, created_at=NOW - 9000)
    lost = ended(EndReason.PREEMPTED, job_id="j-9", zone=ZONES[0], noticed_at=NOW - 30)
    recovering = job("j-9", state=JobState.RECOVERING, attempts=[lost], job_spec=shared)
    first, second = launches(decide(snapshot([fresh, recovering])))
    assert first.job_id == "j-9" and first.candidates[0].market_kind is MarketKind.RESERVED
    assert second.job_id == "j-0" and second.candidates[0].market_kind is MarketKind.SPOT


def test_a_zone_that_loses_every_instance_at_once_is_cooled_and_the_work_moves() -> None:
    batch = spec(kind="batch", workers=3, spread={"min_zones": 1, "min_instance_types": 1})
    in_a = [
        attempt(n=i, node=i, zone=ZONES[0], instance_type=t) for i, t in enumerate((H100, A100))
    ]
    in_b = attempt(n=2, node=2, zone=ZONES[1], instance_type=A100)
    j = job(attempts=[*in_a, in_b], job_spec=batch, shards_enqueued=True)
    gone = {
        a.instance_id or "": instance_of(a, InstanceState.PREEMPTED, ended_at=NOW - 3) for a in in_a
    }
    gone[in_b.instance_id or ""] = instance_of(in_b)
    actions = decide(snapshot([j], instances=gone))
    zone = MarketId(PROVIDER, REGION, ZONES[0], "")
    outage = [c for c in of_type(actions, CoolDown) if c.market == zone]
    assert outage and "zone outage: 2 instances" in outage[0].reason
    relaunched = launches(actions)
    assert len(relaunched) == 2
    assert all(launch.candidates[0].market_id.zone != ZONES[0] for launch in relaunched)
    # On-demand in the lost zone is out too (the whole zone is cooled).
    od = spec(kind="batch", workers=3, market="on-demand")
    actions = decide(snapshot([j.with_(spec=od)], instances=gone))
    assert all(launch.candidates[0].market_id.zone != ZONES[0] for launch in launches(actions))


def test_one_lost_instance_is_not_a_zone_outage() -> None:
    old = attempt(zone=ZONES[0])
    gone = {old.instance_id or "": instance_of(old, InstanceState.PREEMPTED, ended_at=NOW - 3)}
    actions = decide(snapshot([job(attempts=[old])], instances=gone))
    assert [c.market for c in of_type(actions, CoolDown)] == [old.market]


def test_an_instance_lost_with_no_notice_is_preempted_and_relaunched() -> None:
    old = attempt(zone=ZONES[0], instance_type=H100)
    gone = {old.instance_id or "": instance_of(old, InstanceState.PREEMPTED, ended_at=NOW - 3)}
    actions = decide(snapshot([job(attempts=[old])], instances=gone))
    assert of_type(actions, EndAttempt)[0].reason is EndReason.PREEMPTED
    assert launches(actions)[0].candidates[0].market_id != old.market


@pytest.mark.parametrize("state", [AttemptState.LAUNCHING, AttemptState.PENDING])
def test_an_instance_launched_a_moment_ago_and_not_yet_listed_is_not_gone(
    state: AttemptState,
) -> None:
    grace = ControllerConfig().listing_grace_s
    fresh = attempt(state=state, launched_at=NOW - 1, running_at=None)
    assert of_type(decide(snapshot([job(attempts=[fresh])], instances={})), EndAttempt) == []
    late = attempt(state=state, launched_at=NOW - grace - 1, running_at=None)
    ended = of_type(decide(snapshot([job(attempts=[late])], instances={})), EndAttempt)
    assert [e.reason for e in ended] == [EndReason.FAILED]  # past the grace: gone


def test_an_instance_missing_from_a_provider_that_did_not_answer_is_unknown_not_gone() -> None:
    old = attempt()
    world = snapshot([job(attempts=[old])], instances={})
    blind = dataclasses.replace(world, listed_providers=frozenset())
    assert decide(blind) == []
    assert of_type(decide(world), EndAttempt)[0].reason is EndReason.FAILED


# -- notice-blind instances -----------------------------------------------------------------


@pytest.mark.parametrize("event_kind", ["self_check", "notice_blind"])
def test_aggressive_keeps_a_notice_blind_instance(event_kind: str) -> None:
    running = attempt(zone=ZONES[0], instance_type=H100)
    event = (
        SelfCheckEvent(**stamp(running), notice_blind=True, reasons=("no metadata",))
        if event_kind == "self_check"
        else NoticeBlind(**stamp(running), reasons=("no metadata",))
    )
    j = job(attempts=[running], job_spec=spec(tolerance="aggressive"))
    actions = decide(snapshot([j], events=[event]))
    assert [type(a) for a in actions] == [UpdateAttempt]
    assert actions[0].fields == {"notice_blind": True}


def test_balanced_replaces_a_notice_blind_instance_on_spot_of_another_type() -> None:
    running = attempt(zone=ZONES[0], instance_type=H100, notice_blind=True)
    actions = decide(snapshot([job(attempts=[running])]))
    (launch,) = launches(actions)
    assert launch.replaces == running.attempt_id and "notice-blind" in launch.reason
    assert launch.candidates[0].market_kind is MarketKind.SPOT
    assert launch.candidates[0].market_id.instance_type != H100
    assert of_type(actions, RequestCheckpoint)[0].instance_id == running.instance_id


def test_conservative_moves_a_notice_blind_instance_off_spot() -> None:
    running = attempt(zone=ZONES[0], instance_type=H100, notice_blind=True)
    j = job(attempts=[running], job_spec=spec(tolerance="conservative"))
    (launch,) = launches(decide(snapshot([j])))
    assert launch.replaces == running.attempt_id
    assert launch.candidates[0].market_kind is MarketKind.ON_DEMAND


def test_a_custom_config_changes_the_cooldown() -> None:
    old = attempt(zone=ZONES[0], instance_type=H100)
    notice = FinalNotice(**stamp(old), cause="spot", deadline_unix_s=NOW + 30)
    actions = decide(
        snapshot([job(attempts=[old])], events=[notice]), ControllerConfig(cooldown_s=60)
    )
    assert of_type(actions, CoolDown)[0].until_s == pytest.approx(NOW - 5 + 60)


def test_an_old_instance_is_terminated_a_grace_after_its_replacement_ran_if_no_stop_was_recorded() -> (
    None
):
    old = attempt(n=0, state=AttemptState.NOTICED, noticed_at=NOW - 4000)
    new = attempt(n=1, zone=ZONES[1], state=AttemptState.RUNNING, running_at=NOW - 3600)
    actions = decide(snapshot([job(attempts=[old, new])]))
    assert [t.instance_id for t in of_type(actions, Terminate)] == [old.instance_id]
    assert not of_type(actions, RequestStop)
