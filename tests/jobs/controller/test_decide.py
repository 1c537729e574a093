"""decide: first launches, reserved pools, spreading, failover, and the job's state."""

from __future__ import annotations

import pytest

from spothop.jobs.controller import (
    EnqueueShards,
    Launch,
    SetJobState,
    Waiting,
    decide,
)
from spothop.jobs.controller.snapshot import LAUNCH_CUT
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.scheduler.market_view import MarketKind
from tests.jobs.controller.factories import (
    A100,
    H100,
    NOW,
    ZONES,
    attempt,
    ended,
    job,
    launches,
    market,
    market_id,
    of_type,
    snapshot,
    spec,
)


def test_a_pending_task_job_launches_its_best_candidate_and_is_provisioning() -> None:
    actions = decide(snapshot([job(state=JobState.PENDING)]))
    (launch,) = launches(actions)
    assert launch.job_id == "j-1" and launch.node == 0 and launch.token == "j-1.a0"
    assert not launch.parallel and launch.replaces is None
    assert len(launch.candidates) == 1
    (best,) = launch.candidates
    assert best.market_kind is MarketKind.SPOT
    assert actions[-1] == SetJobState("j-1", JobState.PROVISIONING, "launches under way")


def test_a_pending_batch_job_enqueues_then_spreads_its_workers_over_zones_and_types() -> None:
    batch = job(state=JobState.PENDING, job_spec=spec(kind="batch", workers=4))
    actions = decide(snapshot([batch]))
    assert actions[0] == EnqueueShards("j-1")
    found = launches(actions)
    assert [launch.node for launch in found] == [0, 1, 2, 3]
    assert len({launch.token for launch in found}) == 4
    places = [launch.candidates[0].market_id for launch in found]
    assert len({m.zone for m in places}) >= 2
    assert len({m.instance_type for m in places}) >= 2


def test_a_reserved_pool_is_filled_before_spot() -> None:
    pool = {"provider": "fake", "instance_type": A100, "zone": ZONES[1], "count": 1}
    batch = job(state=JobState.PENDING, job_spec=spec(kind="batch", workers=2, reserved=[pool]))
    first, second = launches(decide(snapshot([batch])))
    assert first.candidates[0].market_kind is MarketKind.RESERVED
    assert first.candidates[0].market_id == market_id(ZONES[1], A100)
    assert first.reason == "reserved capacity first"
    assert second.candidates[0].market_kind is MarketKind.SPOT


def test_a_reserved_pool_in_use_by_another_job_is_not_used_again() -> None:
    pool = {"provider": "fake", "instance_type": A100, "zone": ZONES[1], "count": 1}
    with_pool = spec(reserved=[pool])
    holder = job(
        "j-0",
        attempts=[attempt("j-0", zone=ZONES[1], kind=MarketKind.RESERVED)],
        job_spec=with_pool,
    )
    newcomer = job("j-1", state=JobState.PENDING, job_spec=with_pool)
    (launch,) = launches(decide(snapshot([holder, newcomer])))
    assert launch.job_id == "j-1"
    assert launch.candidates[0].market_kind is MarketKind.SPOT


def test_a_failed_launch_fails_over_to_the_next_three_at_once_skipping_failed_markets() -> None:
    failed = ended(
        EndReason.LAUNCH_FAILED,
        zone=ZONES[0],
        instance_type=H100,
        instance_id=None,
        running_at=None,
        error_code="InsufficientInstanceCapacity",
    )
    actions = decide(snapshot([job(state=JobState.PROVISIONING, attempts=[failed])]))
    (launch,) = launches(actions)
    assert launch.parallel
    assert len(launch.candidates) == 3
    assert market_id(ZONES[0], H100) not in [c.market_id for c in launch.candidates]
    assert "InsufficientInstanceCapacity" in launch.reason
    assert launch.token == "j-1.a1"


def test_two_failures_skip_both_markets() -> None:
    fails = [
        ended(EndReason.LAUNCH_FAILED, n=i, zone=z, instance_type=H100, instance_id=None)
        for i, z in enumerate(ZONES[:2])
    ]
    (launch,) = launches(decide(snapshot([job(state=JobState.PROVISIONING, attempts=fails)])))
    failed = {market_id(z, H100) for z in ZONES[:2]}
    assert failed.isdisjoint(c.market_id for c in launch.candidates)


def test_nothing_usable_waits_and_a_provisioning_job_goes_back_to_pending() -> None:
    everything = [(z, t) for z in ZONES for t in (H100, A100)]
    view = market(unavailable=everything)
    aggressive = spec(tolerance="aggressive")
    actions = decide(snapshot([job(state=JobState.PROVISIONING, job_spec=aggressive)], view))
    (waiting,) = of_type(actions, Waiting)
    assert waiting.node == 0 and "aggressive" in waiting.reason
    assert "no price or capacity" in waiting.reason
    assert actions[-1].state is JobState.PENDING
    assert not launches(actions)


@pytest.mark.parametrize(
    ("attempt_state", "expected"),
    [
        (AttemptState.RUNNING, [JobState.RUNNING]),
        (AttemptState.PENDING, []),
        (AttemptState.LAUNCHING, []),
    ],
)
def test_a_provisioning_job_runs_once_its_node_runs(
    attempt_state: AttemptState, expected: list[JobState]
) -> None:
    j = job(
        state=JobState.PROVISIONING, attempts=[attempt(state=attempt_state, launched_at=NOW - 5)]
    )
    states = [a.state for a in of_type(decide(snapshot([j])), SetJobState)]
    assert states == expected


def test_a_running_job_with_every_node_up_asks_for_nothing() -> None:
    assert decide(snapshot([job(attempts=[attempt()])])) == []


def test_a_launch_in_flight_is_not_launched_again() -> None:
    launching = attempt(state=AttemptState.LAUNCHING, instance_id=None, launched_at=NOW - 5)
    assert decide(snapshot([job(state=JobState.PROVISIONING, attempts=[launching])])) == []


def test_a_launch_with_no_instance_after_the_timeout_failed_and_is_failed_over() -> None:
    lost = attempt(state=AttemptState.LAUNCHING, instance_id=None, launched_at=NOW - 3600)
    actions = decide(snapshot([job(state=JobState.PROVISIONING, attempts=[lost])]))
    end = actions[0]
    assert end.attempt_id == lost.attempt_id and end.reason is EndReason.LAUNCH_FAILED
    (launch,) = launches(actions)
    assert launch.parallel


@pytest.mark.parametrize(
    ("started_at", "listed", "in_flight", "ends"),
    [
        (
            NOW - 2,
            True,
            False,
            True,
        ),  # stored before this controller started: its launch died with it
        (NOW - 10, True, False, False),  # stored by this controller: its launch call may be running
        (None, True, False, False),  # start unknown: only the launch timeout ends it
        (NOW - 2, False, False, False),  # its provider did not answer: it may be there
        # This controller's own launch, in flight, its time read early (a launch time moved from
        # the provider's clock reads up to an observe's length early): not cut.
        (NOW - 2, True, True, False),
    ],
)
def test_a_launch_cut_by_a_controller_crash_is_relaunched_at_once_in_its_market(
    started_at: float | None, listed: bool, in_flight: bool, ends: bool
) -> None:
    from dataclasses import replace

    # Cut in the market a first launch picks: a failed market would be left out of the next.
    (first,) = launches(decide(snapshot([job(state=JobState.PENDING, attempts=[])])))
    best = first.candidates[0].market_id
    cut = attempt(
        state=AttemptState.LAUNCHING,
        instance_id=None,
        launched_at=NOW - 5,
        zone=best.zone,
        instance_type=best.instance_type,
    )
    world = replace(
        snapshot([job(state=JobState.PROVISIONING, attempts=[cut])]),
        controller_started_at=started_at,
        listed_providers=frozenset({cut.provider}) if listed else frozenset(),
        launching=frozenset({(cut.job_id, cut.node)}) if in_flight else frozenset(),
    )
    actions = decide(world)
    if not ends:
        assert actions == []
        return
    end = actions[0]
    assert end.attempt_id == cut.attempt_id and end.reason is EndReason.LAUNCH_FAILED
    assert "controller" in end.detail and end.error_code == LAUNCH_CUT
    (launch,) = launches(actions)
    assert launch.token == "j-1.a1"
    # The market did not refuse it: no failover, and the same choice as the first launch's.
    assert not launch.parallel
    assert launch.candidates == first.candidates


def test_an_instance_of_a_crash_cut_launch_listed_late_is_terminated() -> None:
    """The cut launch did start its instance; the listing shows it after the attempt ended."""
    from spothop.jobs.controller import Terminate
    from tests.jobs.controller.factories import instance_of

    cut = ended(EndReason.LAUNCH_FAILED, instance_id=None, running_at=None)
    late = instance_of(cut.with_(instance_id="i-late"))
    world = snapshot([job(state=JobState.RECOVERING, attempts=[cut])], instances={"i-late": late})
    terminates = of_type(decide(world), Terminate)
    assert [t.instance_id for t in terminates] == ["i-late"]


def test_an_instance_tagged_with_a_launching_attempts_token_is_adopted() -> None:
    from spothop.jobs.controller import UpdateAttempt
    from tests.jobs.controller.factories import instance_of

    launching = attempt(state=AttemptState.LAUNCHING, instance_id=None, launched_at=NOW - 30)
    found = instance_of(launching.with_(instance_id="i-new"))
    world = snapshot(
        [job(state=JobState.PROVISIONING, attempts=[launching])], instances={"i-new": found}
    )
    actions = decide(world)
    update = of_type(actions, UpdateAttempt)[0]
    assert update.fields["instance_id"] == "i-new"
    assert update.state is AttemptState.RUNNING
    assert not launches(actions)
    assert of_type(actions, SetJobState)[-1].state is JobState.RUNNING


def test_each_launch_of_a_pass_gets_its_own_token() -> None:
    two = job(state=JobState.PENDING, job_spec=spec(num_nodes=2))
    tokens = [launch.token for launch in launches(decide(snapshot([two])))]
    assert tokens == ["j-1.a0", "j-1.a1"]


def test_launch_serialises_its_candidates() -> None:
    (launch,) = launches(decide(snapshot([job(state=JobState.PENDING)])))
    data = launch.to_dict()
    assert data["action"] == "launch" and data["job_id"] == "j-1"
    assert data["candidates"][0]["market_kind"] == "spot"
    assert isinstance(Launch, type)


def test_a_failover_uses_a_reserved_pool_only_while_it_has_room() -> None:
    pool = {"provider": "fake", "instance_type": A100, "zone": ZONES[1], "count": 1}
    with_pool = spec(reserved=[pool])
    failed = ended(EndReason.LAUNCH_FAILED, zone=ZONES[0], instance_type=H100, instance_id=None)
    lone = job(state=JobState.PROVISIONING, attempts=[failed], job_spec=with_pool)
    (launch,) = launches(decide(snapshot([lone])))
    assert launch.parallel and launch.candidates[0].market_kind is MarketKind.RESERVED
    holder = job(
        "j-0",
        attempts=[attempt("j-0", zone=ZONES[1], kind=MarketKind.RESERVED)],
        job_spec=with_pool,
    )
    (launch,) = launches(decide(snapshot([holder, lone])))
    assert MarketKind.RESERVED not in {c.market_kind for c in launch.candidates}
