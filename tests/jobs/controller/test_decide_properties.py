"""decide over arbitrary snapshots: deterministic, and never an illegal or contradictory action."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spothop.jobs.controller import (
    EndAttempt,
    Launch,
    SetJobState,
    Snapshot,
    UpdateAttempt,
    decide,
)
from spothop.jobs.lifecycle import (
    ATTEMPT_TRANSITIONS,
    AttemptState,
    EndReason,
    JobState,
    check_transition,
)
from spothop.providers.base import InstanceState
from spothop.scheduler.market_view import MarketKind
from spothop.wire.events import (
    AdvanceNotice,
    AgentEvent,
    Exited,
    FinalNotice,
    NoticeBlind,
    WorkerStarted,
)
from tests.jobs.controller.factories import (
    A100,
    H100,
    NOW,
    ZONES,
    attempt,
    instance_of,
    job,
    market,
    queue,
    spec,
    stamp,
)
from tests.waiting import scaled

SETTINGS = settings(
    max_examples=120,
    deadline=timedelta(seconds=scaled(5.0)),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
VIEW = market()
SPECS = [
    spec(),
    spec(num_nodes=2, tolerance="aggressive"),
    spec(tolerance="conservative", max_interruptions=2),
    spec(max_interruptions=1, on_max_interruptions="fail", max_retries=1),
    spec(market="on-demand"),
    spec(market="auto"),
    spec(kind="batch", workers=3),
    spec(
        kind="batch",
        workers=2,
        reserved=[{"provider": "fake", "instance_type": A100, "zone": ZONES[1], "count": 1}],
    ),
]


@st.composite
def attempts(draw: Any, job_id: str, nodes: int) -> list[Any]:
    out = []
    for n in range(draw(st.integers(0, 5))):
        state = draw(st.sampled_from(list(AttemptState)))
        fields: dict[str, Any] = {
            "job_id": job_id,
            "n": n,
            "node": draw(st.integers(0, nodes - 1)),
            "zone": draw(st.sampled_from(ZONES)),
            "instance_type": draw(st.sampled_from((H100, A100))),
            "kind": draw(st.sampled_from(list(MarketKind))),
            "state": state,
            "launched_at": NOW - draw(st.sampled_from((5.0, 200.0, 3600.0))),
            "notice_blind": draw(st.booleans()),
        }
        if state is AttemptState.LAUNCHING and draw(st.booleans()):
            fields["instance_id"] = None
        if state is AttemptState.NOTICED:
            fields["noticed_at"] = NOW - draw(st.sampled_from((1.0, 100.0)))
            fields["notice_final"] = draw(st.booleans())
            fields["notice_deadline_s"] = draw(st.sampled_from((None, NOW + 20, NOW + 900)))
        if state is AttemptState.ENDED:
            fields["end_reason"] = draw(st.sampled_from(list(EndReason)))
            fields["ended_at"] = NOW - draw(st.sampled_from((1.0, 100.0, 5000.0)))
            if fields["end_reason"] is EndReason.PREEMPTED:
                fields["noticed_at"] = fields["ended_at"] - 30
        if draw(st.booleans()):
            fields["stop_requested_at"] = NOW - draw(st.sampled_from((10.0, 1000.0)))
        out.append(attempt(**fields))
    return out


def _event(kind: str, a: Any) -> AgentEvent:
    common = stamp(a)
    if kind == "exit0":
        return Exited(**common, code=0)
    if kind == "exit75":
        return Exited(**common, code=75)
    if kind == "exit1":
        return Exited(**common, code=1)
    if kind == "advance":
        return AdvanceNotice(**common, cause="rebalance")
    if kind == "final":
        return FinalNotice(**common, cause="spot", deadline_unix_s=NOW + 30)
    if kind == "blind":
        return NoticeBlind(**common)
    return WorkerStarted(**common)


EVENT_KINDS = ["exit0", "exit75", "exit1", "advance", "final", "blind", "started"]


@st.composite
def snapshots(draw: Any) -> Snapshot:
    jobs = []
    events: list[AgentEvent] = []
    instances = {}
    for i in range(draw(st.integers(1, 3))):
        job_spec = draw(st.sampled_from(SPECS))
        job_id = f"j-{i}"
        tries = draw(attempts(job_id, job_spec.node_count))
        batch = job_spec.batch is not None
        fields: dict[str, Any] = {
            "state": draw(st.sampled_from(list(JobState))),
            "cancel_requested": draw(st.booleans()) and draw(st.booleans()),
            "on_demand_forced": draw(st.booleans()),
        }
        if batch:
            fields["shards_enqueued"] = draw(st.booleans())
            fields["outputs_published"] = draw(st.booleans())
            if fields["shards_enqueued"]:
                fields["queue"] = queue(
                    job_id,
                    pending=draw(st.integers(0, 3)),
                    leased=draw(st.integers(0, 3)),
                    dead=draw(st.integers(0, 1)),
                )
                if draw(st.booleans()):
                    fields["busy_instances"] = frozenset(
                        a.instance_id for a in tries if a.instance_id and draw(st.booleans())
                    )
        jobs.append(job(job_id, attempts=tries, job_spec=job_spec, **fields))
        for a in tries:
            if a.instance_id and draw(st.booleans()):
                state = draw(st.sampled_from(list(InstanceState)))
                instances[a.instance_id] = instance_of(a, state, ended_at=NOW - 3)
            if a.instance_id and draw(st.integers(0, 3)) == 0:
                events.append(_event(draw(st.sampled_from(EVENT_KINDS)), a))
    cooled = {}
    if draw(st.booleans()):
        a = draw(st.sampled_from([a for j in jobs for a in j.attempts] or [attempt()]))
        cooled[a.market] = NOW + 100
    return Snapshot(
        now=NOW,
        jobs=tuple(jobs),
        market=VIEW,
        cooldowns=cooled,
        instances=instances,
        listed_providers=frozenset({"fake"}) if draw(st.booleans()) else frozenset(),
        events=tuple(events),
    )


@SETTINGS
@given(snapshots())
def test_decide_is_deterministic(world: Snapshot) -> None:
    first = decide(world)
    assert decide(copy.deepcopy(world)) == first
    assert decide(world) == first


@SETTINGS
@given(snapshots())
def test_decide_never_asks_an_illegal_or_contradictory_change(world: Snapshot) -> None:
    actions = decide(world)
    jobs = {j.job_id: j for j in world.jobs}
    attempts = {a.attempt_id: a for j in world.jobs for a in j.attempts}
    # Every job's state changes walk the lifecycle table from its current state.
    state = {job_id: j.state for job_id, j in jobs.items()}
    for action in actions:
        if isinstance(action, SetJobState):
            check_transition(state[action.job_id], action.state)
            state[action.job_id] = action.state
    # An attempt is ended at most once, and only if it was live; updates follow the attempt table.
    ends = Counter(a.attempt_id for a in actions if isinstance(a, EndAttempt))
    assert all(count == 1 for count in ends.values())
    assert all(attempts[attempt_id].alive for attempt_id in ends)
    for action in actions:
        if isinstance(action, UpdateAttempt) and action.state is not None:
            before = attempts[action.attempt_id].state
            assert action.state in ATTEMPT_TRANSITIONS[before] or action.state is before
    # Launches: only for live, uncancelled jobs that stay live; each with a fresh token.
    tokens = {a.launch_token for a in attempts.values()}
    launches = [a for a in actions if isinstance(a, Launch)]
    assert len({launch.token for launch in launches}) == len(launches)
    for launch in launches:
        j = jobs[launch.job_id]
        assert not j.state.final and not j.cancel_requested
        assert not state[launch.job_id].final
        assert launch.token not in tokens
        assert launch.candidates and (launch.parallel or len(launch.candidates) == 1)
        assert 0 <= launch.node < j.spec.node_count


def _apply(world: Snapshot, actions: list[Any]) -> Snapshot:
    """The world after an executor carried ``actions`` out at once (launches still in flight)."""
    import dataclasses

    from spothop.jobs.controller import CoolDown, ForceOnDemand

    jobs = {j.job_id: j for j in world.jobs}
    views = {a.attempt_id: a for j in world.jobs for a in j.attempts}
    added: dict[str, list[Any]] = {}
    cooldowns = dict(world.cooldowns)
    for action in actions:
        if isinstance(action, SetJobState):
            jobs[action.job_id] = jobs[action.job_id].with_(state=action.state)
        elif isinstance(action, ForceOnDemand):
            jobs[action.job_id] = jobs[action.job_id].with_(on_demand_forced=True)
        elif isinstance(action, CoolDown):
            cooldowns[action.market] = max(cooldowns.get(action.market, 0.0), action.until_s)
        elif isinstance(action, UpdateAttempt):
            a = views[action.attempt_id]
            views[a.attempt_id] = a.with_(state=action.state or a.state, **action.fields)
        elif isinstance(action, EndAttempt):
            a = views[action.attempt_id]
            views[a.attempt_id] = a.with_(
                state=AttemptState.ENDED, end_reason=action.reason, ended_at=action.at_s
            )
        elif isinstance(action, Launch):
            c = action.candidates[0]
            o = c.offering
            added.setdefault(action.job_id, []).append(
                attempt(
                    job_id=action.job_id,
                    node=action.node,
                    attempt_id=f"{action.token}-x",
                    launch_token=action.token,
                    zone=o.zone,
                    instance_type=o.instance_type,
                    kind=c.market_kind,
                    state=AttemptState.LAUNCHING,
                    instance_id=None,
                    launched_at=world.now,
                    running_at=None,
                )
            )
    new_jobs = tuple(
        j.with_(
            attempts=tuple(views[a.attempt_id] for a in j.attempts) + tuple(added.get(j.job_id, ()))
        )
        for j in jobs.values()
    )
    return dataclasses.replace(world, jobs=new_jobs, cooldowns=cooldowns, events=())


@SETTINGS
@given(snapshots())
def test_deciding_again_after_the_actions_were_carried_out_repeats_none_of_them(
    world: Snapshot,
) -> None:
    first = decide(world)
    second = decide(_apply(world, first))
    launched = {(a.job_id, a.node) for a in first if isinstance(a, Launch)}
    assert not [a for a in second if isinstance(a, Launch) and (a.job_id, a.node) in launched]
    assert not [a for a in second if type(a).__name__ == "CoolDown"]
    assert not [a for a in second if isinstance(a, UpdateAttempt)]
    # The state it settled on stays: a second pass changes no job's state again.
    assert not [a for a in second if isinstance(a, SetJobState)]
