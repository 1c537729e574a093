"""decide and zones: a zone that just interrupted an instance is suspected; an outage's verdict."""

from __future__ import annotations

import pytest

from spothop.jobs.controller import CoolDown, RequestStop, Terminate, decide
from spothop.jobs.controller.config import COOLDOWN_S, ZONE_SUSPICION_S, ControllerConfig
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind
from tests.jobs.controller.factories import (
    A100,
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
    snapshot,
    spec,
)

ZONE_A = MarketId(PROVIDER, REGION, ZONES[0], "")
# Zone A's other type (A100) is the best market left: only the suspicion keeps a relaunch off it.
A_BEST = {(z, A100): 2.0 for z in ZONES[1:]}
NO_H100_ELSEWHERE = [(z, H100) for z in ZONES[1:]]
ONLY_A100_IN_A = [(z, t) for z in ZONES for t in (H100, A100) if (z, t) != (ZONES[0], A100)]


@pytest.mark.parametrize(
    ("loss", "age_s", "unavailable", "lands_in_a"),
    [
        ("preempted", 60.0, NO_H100_ELSEWHERE, False),  # suspected: elsewhere, though worse
        ("advance notice", 60.0, NO_H100_ELSEWHERE, False),  # a notice suspects the zone too
        ("preempted", ZONE_SUSPICION_S + 100, NO_H100_ELSEWHERE, True),  # over: A's best again
        ("preempted", 60.0, ONLY_A100_IN_A, True),  # no candidate elsewhere: the zone after all
    ],
)
def test_a_relaunch_avoids_the_zone_that_just_interrupted_its_instance(
    loss: str, age_s: float, unavailable: list[tuple[str, str]], lands_in_a: bool
) -> None:
    t = NOW - age_s
    if loss == "preempted":
        old = ended(EndReason.PREEMPTED, zone=ZONES[0], instance_type=H100, noticed_at=t)
        state = JobState.RECOVERING
    else:
        old = attempt(zone=ZONES[0], instance_type=H100, state=AttemptState.NOTICED, noticed_at=t)
        state = JobState.RUNNING
    j = job(state=state, attempts=[old], job_spec=spec(tolerance="aggressive"))
    # The market cooldown keeps A's H100 off; the zone's other type is left to the suspicion.
    world = snapshot([j], market(A_BEST, unavailable), cooldowns={old.market: t + COOLDOWN_S})
    (launch,) = launches(decide(world))
    zones = {c.market_id.zone for c in launch.candidates}
    assert (zones == {ZONES[0]}) if lands_in_a else (ZONES[0] not in zones), launch.candidates
    assert all(c.market_id != old.market for c in launch.candidates)


def test_suspicion_is_a_config_knob() -> None:
    old = ended(EndReason.PREEMPTED, zone=ZONES[0], instance_type=H100, noticed_at=NOW - 60)
    j = job(state=JobState.RECOVERING, attempts=[old], job_spec=spec(tolerance="aggressive"))
    world = snapshot(
        [j], market(A_BEST, NO_H100_ELSEWHERE), cooldowns={old.market: NOW - 60 + COOLDOWN_S}
    )
    (launch,) = launches(decide(world, ControllerConfig(zone_suspicion_s=30)))
    assert launch.candidates[0].market_id.zone == ZONES[0]


def _outage_in_a() -> tuple[list, object]:
    """Node 0 lost its instance in zone A, and its replacement went to A again (another type)
    before node 1's instance there was lost too; node 2 runs in zone B."""
    batch = spec(kind="batch", workers=3, spread={"min_zones": 1, "min_instance_types": 1})
    first = ended(
        EndReason.PREEMPTED, n=0, node=0, zone=ZONES[0], instance_type=A100, noticed_at=NOW - 90
    )
    again = attempt(
        n=3, node=0, zone=ZONES[0], instance_type=H100, launched_at=NOW - 85, running_at=NOW - 30
    )
    second = ended(
        EndReason.PREEMPTED, n=1, node=1, zone=ZONES[0], instance_type=H100, noticed_at=NOW - 5
    )
    elsewhere = attempt(n=2, node=2, zone=ZONES[1], instance_type=A100)
    return [first, again, second, elsewhere], batch


def test_a_replacement_launched_into_the_zone_during_the_window_does_not_hide_the_outage() -> None:
    attempts, batch = _outage_in_a()
    again = attempts[1]
    j = job(state=JobState.RECOVERING, attempts=attempts, job_spec=batch, shards_enqueued=True)
    actions = decide(snapshot([j]))
    (outage,) = [c for c in of_type(actions, CoolDown) if c.market == ZONE_A]
    assert "zone outage: 2 instances" in outage.reason
    relaunched = {launch.node: launch for launch in launches(actions)}
    assert set(relaunched) == {0, 1}
    assert all(c.market_id.zone != ZONES[0] for x in relaunched.values() for c in x.candidates)
    # The replacement in the lost zone is moved make-before-break: replaced, not yet stopped.
    assert relaunched[0].replaces == again.attempt_id and "zone outage" in relaunched[0].reason
    assert not of_type(actions, Terminate) and not of_type(actions, RequestStop)
    assert of_type(actions, CoolDown)  # and the level-triggered verdict holds on the next pass:
    stored = {c.market: c.until_s for c in of_type(actions, CoolDown)}
    again_pass = decide(snapshot([j], cooldowns=stored))
    assert not of_type(again_pass, CoolDown)
    assert [x.replaces for x in launches(again_pass) if x.node == 0] == [again.attempt_id]


def test_an_instance_in_the_zone_before_the_first_loss_is_a_survivor() -> None:
    attempts, batch = _outage_in_a()
    survivor = attempt(n=4, node=2, zone=ZONES[0], instance_type=A100, launched_at=NOW - 600)
    j = job(
        state=JobState.RECOVERING,
        attempts=[*attempts[:3], survivor],
        job_spec=batch,
        shards_enqueued=True,
    )
    actions = decide(snapshot([j]))
    assert not [c for c in of_type(actions, CoolDown) if c.market == ZONE_A]
    assert all(launch.replaces is None for launch in launches(actions))


def test_once_moved_the_old_replacement_is_stopped_when_the_new_one_runs() -> None:
    attempts, batch = _outage_in_a()
    again = attempts[1]
    moved = attempt(n=5, node=0, zone=ZONES[1], instance_type=H100, launched_at=NOW - 4)
    moved = moved.with_(running_at=NOW - 1)
    j = job(
        state=JobState.RECOVERING,
        attempts=[*attempts, moved],
        job_spec=batch,
        shards_enqueued=True,
    )
    actions = decide(snapshot([j], cooldowns={ZONE_A: NOW - 5 + COOLDOWN_S}))
    (stop,) = of_type(actions, RequestStop)
    assert stop.instance_id == again.instance_id
    assert all(x.node != 0 for x in launches(actions))
    assert all(c.market_kind is MarketKind.SPOT for x in launches(actions) for c in x.candidates)
