"""Grouped tasks in ``decide`` (jobs/controller/group.py): launched, stopped and relaunched together.

Tables of snapshots and the actions expected, no processes; the end-to-end run with real
instances and torch.distributed is tests/e2e/test_ddp.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from spothop.errors import JobSpecError
from spothop.jobs.controller import (
    EndAttempt,
    Launch,
    RequestStop,
    SetJobState,
    Terminate,
    Waiting,
    decide,
)
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.fold import fold
from spothop.jobs.launcher import GroupEnv, WorkerCommand, bootstrap, group_port
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.fake.factories import make_offering
from spothop.scheduler.market_view import MarketKind, MarketState, MarketView
from spothop.scheduler.placement import Candidate
from spothop.testing import FakeProvider, make_market, make_offerings
from spothop.wire.events import Exited, FinalNotice
from spothop.wire.group import deferred
from tests.jobs.controller.factories import (
    A100,
    BOOT_S,
    NOW,
    PROVIDER,
    REGION,
    ZONES,
    attempt,
    job,
    launches,
    of_type,
    snapshot,
    spec,
    stamp,
)
from tests.waiting import wait_for

A100X2 = "gpu.a100x2"


def group_attempt(node: int, generation: int = 0, nnodes: int = 2, **fields: Any) -> Any:
    n = fields.pop("n", generation * 10 + node)
    return attempt(node=node, n=n, generation=generation, group_nnodes=nnodes, **fields)


def two_node(**fields: Any) -> Any:
    """Spot only (aggressive): a market with no spot capacity left is no candidate."""
    return spec(
        num_nodes=2, tolerance="aggressive", checkpoint={"url": "s3://ckpt/train"}, **fields
    )


def view_of(sold: dict[str, int], known: dict[str, int] | None = None) -> MarketView:
    """A market selling each ``type → GPUs per instance`` of ``sold`` in every zone; the
    ``known`` types are in the catalog (a zone of their own) but their markets have no capacity."""
    offerings = _offerings(sold, ZONES) + _offerings(known or {}, ("fake-1z",))
    markets = {
        o.market_id: MarketState(
            o.market_id, available=o.zone != "fake-1z", preemption_rate_per_h=0.02
        )
        for o in offerings
    }
    return MarketView(
        now=NOW, offerings=tuple(offerings), markets=markets, boot_s={PROVIDER: BOOT_S}
    )


def _offerings(types: dict[str, int], zones: tuple[str, ...]) -> list[Any]:
    return [
        make_offering(
            provider=PROVIDER,
            region=REGION,
            zone=zone,
            instance_type=name,
            gpu="A100-SXM4-80GB",
            gpu_count=gpus,
            vcpus=12.0 * gpus,
            memory_gib=85.0 * gpus,
            on_demand_price_usd_per_hour=2.5 * gpus,
            spot_price_usd_per_hour=0.9 * gpus,
        )
        for zone in zones
        for name, gpus in types.items()
    ]


def final_notice(a: Any, deadline: float, protocol: str = "aws") -> FinalNotice:
    return FinalNotice(
        **stamp(a), protocol=protocol, cause="instance-action", deadline_unix_s=deadline
    )


# -- launch together -------------------------------------------------------------------------


def test_a_two_node_task_is_launched_as_one_group_on_one_market() -> None:
    j = job(state=JobState.PENDING, attempts=(), job_spec=two_node())
    actions = decide(snapshot([j]))
    ls = launches(actions)
    assert [launch.node for launch in ls] == [0, 1]
    assert {launch.generation for launch in ls} == {0}
    assert {launch.group_nnodes for launch in ls} == {2}
    assert len({launch.candidates[0].market_id for launch in ls}) == 1  # one zone, one type
    assert len({launch.token for launch in ls}) == 2
    assert of_type(actions, SetJobState)[-1].state is JobState.PROVISIONING


def test_a_group_whose_nodes_all_run_is_running_and_nothing_is_launched() -> None:
    j = job(
        state=JobState.PROVISIONING,
        attempts=(group_attempt(0), group_attempt(1)),
        job_spec=two_node(),
    )
    actions = decide(snapshot([j]))
    assert not launches(actions) and not of_type(actions, RequestStop)
    assert of_type(actions, SetJobState)[-1].state is JobState.RUNNING


# -- break together --------------------------------------------------------------------------


def test_one_nodes_final_notice_stops_every_other_node_by_the_same_deadline() -> None:
    a0, a1 = group_attempt(0), group_attempt(1)
    j = job(attempts=(a0, a1), job_spec=two_node())
    deadline = NOW + 100
    actions = decide(snapshot([j], events=[final_notice(a1, deadline)]))
    stops = of_type(actions, RequestStop)
    assert [(s.instance_id, s.deadline_s) for s in stops] == [(a0.instance_id, deadline)]
    assert "node 1" in stops[0].reason
    assert not launches(actions)  # the group is relaunched once every node is down
    assert not [e for e in of_type(actions, EndAttempt) if e.attempt_id == a1.attempt_id]
    assert of_type(actions, SetJobState)[-1].state is JobState.RECOVERING


def test_an_advance_notice_stops_the_group_within_the_advance_window() -> None:
    a0 = group_attempt(0)
    a1 = group_attempt(1, state=AttemptState.NOTICED, noticed_at=NOW - 1)
    j = job(attempts=(a0, a1), job_spec=two_node())
    config = ControllerConfig()
    stops = of_type(decide(snapshot([j]), config), RequestStop)
    assert {s.instance_id for s in stops} == {a0.instance_id, a1.instance_id}
    assert {s.deadline_s for s in stops} == {NOW + config.group_advance_stop_s}


def test_a_node_lost_without_notice_stops_the_others_at_once() -> None:
    a0 = group_attempt(0)
    a1 = group_attempt(1, state=AttemptState.ENDED, end_reason=EndReason.FAILED, ended_at=NOW - 1)
    j = job(attempts=(a0, a1), job_spec=two_node())
    stops = of_type(decide(snapshot([j])), RequestStop)
    assert [(s.instance_id, s.deadline_s) for s in stops] == [(a0.instance_id, NOW - 1)]


def _booting_group_node(node: int, **fields: Any) -> Any:
    """A node of generation 0 whose instance boots (its agent registered when ``beat_at`` is set)."""
    return group_attempt(node, state=AttemptState.PENDING, running_at=None, **fields)


def test_a_node_lost_before_the_rendezvous_is_replaced_alone_within_its_generation() -> None:
    """Node 1's agent never registered: no node can have had the rendezvous, so node 0 is left
    waiting and node 1 is relaunched at the same rank, in generation 0, on the group's market."""
    a0 = _booting_group_node(0, beat_at=NOW - 20)
    a1 = group_attempt(
        1, state=AttemptState.ENDED, end_reason=EndReason.AGENT_LOST, ended_at=NOW - 1
    )
    j = job(attempts=(a0, a1), job_spec=two_node())
    actions = decide(snapshot([j]))
    assert not of_type(actions, RequestStop) and not of_type(actions, EndAttempt)
    (launch,) = launches(actions)
    assert (launch.node, launch.generation, launch.group_nnodes) == (1, 0, 2)
    assert [c.market_id for c in launch.candidates] == [a1.market]
    assert "replaced within its generation" in launch.reason


def test_a_replaced_node_is_the_group_and_its_lost_predecessor_is_history() -> None:
    a0 = _booting_group_node(0, beat_at=NOW - 20)
    lost = group_attempt(
        1, state=AttemptState.ENDED, end_reason=EndReason.AGENT_LOST, ended_at=NOW - 100
    )
    again = _booting_group_node(1, n=11, launched_at=NOW - 90)
    j = job(attempts=(a0, lost, again), job_spec=two_node())
    actions = decide(snapshot([j]))
    assert not launches(actions) and not of_type(actions, RequestStop)
    running = replace(again, state=AttemptState.RUNNING, running_at=NOW - 5, beat_at=NOW - 5)
    a0 = replace(a0, state=AttemptState.RUNNING, running_at=NOW - 5)
    j = job(state=JobState.PROVISIONING, attempts=(a0, lost, running), job_spec=two_node())
    states = [s.state for s in of_type(decide(snapshot([j])), SetJobState)]
    assert states == [JobState.RUNNING]


def test_a_node_lost_after_its_agent_registered_breaks_the_generation_as_before() -> None:
    """Registered: the rendezvous may have been handed out and the workers started, so the
    generation stops and the next one is launched whole (rule 3)."""
    a0 = group_attempt(0, beat_at=NOW - 20)
    a1 = group_attempt(
        1,
        state=AttemptState.ENDED,
        end_reason=EndReason.AGENT_LOST,
        ended_at=NOW - 1,
        beat_at=NOW - 200,
    )
    j = job(attempts=(a0, a1), job_spec=two_node())
    actions = decide(snapshot([j]))
    assert [s.instance_id for s in of_type(actions, RequestStop)] == [a0.instance_id]
    assert not launches(actions)


def test_a_replaced_node_whose_agent_registered_after_all_breaks_the_generation() -> None:
    """Found lost unregistered and replaced, its agent then registered (before its end was
    written): node 0 may have met it, so its replacement may not meet node 0 (rule 4)."""
    a0 = group_attempt(0, beat_at=NOW - 20)
    lost = group_attempt(
        1, state=AttemptState.ENDED, end_reason=EndReason.AGENT_LOST, ended_at=NOW - 9
    )
    again = _booting_group_node(1, n=11, launched_at=NOW - 8)
    late = replace(lost, beat_at=NOW - 9)
    assert not of_type(
        decide(snapshot([job(attempts=(a0, lost, again), job_spec=two_node())])), RequestStop
    )
    actions = decide(snapshot([job(attempts=(a0, late, again), job_spec=two_node())]))
    stops = {s.instance_id for s in of_type(actions, RequestStop)}
    assert stops == {a0.instance_id, again.instance_id} and not launches(actions)


def test_a_node_lost_before_the_rendezvous_on_a_market_no_longer_usable_breaks_the_generation() -> (
    None
):
    a0 = _booting_group_node(0, beat_at=NOW - 20, zone="fake-1z")
    a1 = group_attempt(
        1,
        zone="fake-1z",
        state=AttemptState.ENDED,
        end_reason=EndReason.AGENT_LOST,
        ended_at=NOW - 1,
    )
    j = job(attempts=(a0, a1), job_spec=two_node())
    actions = decide(snapshot([j], view=view_of({A100: 1}, known={A100X2: 2})))
    assert [s.instance_id for s in of_type(actions, RequestStop)] == [a0.instance_id]
    assert not launches(actions)


def test_a_node_stopped_with_its_group_is_superseded_not_an_interruption() -> None:
    a0 = group_attempt(0, stop_requested_at=NOW - 5)
    a1 = group_attempt(1, notice_final=True, state=AttemptState.NOTICED, noticed_at=NOW - 6)
    j = job(attempts=(a0, a1), job_spec=two_node())
    events = [
        final_notice(a0, NOW + 50, protocol="control-plane"),
        Exited(**stamp(a0), code=75),
    ]
    jobs, actions = fold(snapshot([j], events=events), ControllerConfig())
    ends = {e.attempt_id: e.reason for e in of_type(actions, EndAttempt)}
    assert ends == {a0.attempt_id: EndReason.SUPERSEDED}
    assert jobs[0].interruptions == 1  # node 1's, the cloud's notice; not node 0's stop


def test_the_controllers_stop_stored_as_a_final_notice_is_no_interruption_of_a_group() -> None:
    a0 = group_attempt(0, notice_final=True, notice_by_controller=True, stop_requested_at=NOW - 5)
    a1 = group_attempt(1, state=AttemptState.ENDED, end_reason=EndReason.PREEMPTED)
    j = job(attempts=(a0, a1), job_spec=two_node())
    jobs, _ = fold(snapshot([j]), ControllerConfig())
    assert jobs[0].interruptions == 1


def test_a_member_still_up_after_its_stop_deadline_and_grace_is_terminated() -> None:
    config = ControllerConfig()
    late = NOW - config.group_stop_grace_s - 1
    a0 = group_attempt(0, stop_requested_at=late - 1)
    a1 = group_attempt(1, state=AttemptState.ENDED, end_reason=EndReason.PREEMPTED, ended_at=late)
    j = job(attempts=(a0, a1), job_spec=two_node())
    actions = decide(snapshot([j]), config)
    assert [t.instance_id for t in of_type(actions, Terminate)] == [a0.instance_id]
    ends = of_type(actions, EndAttempt)
    assert [(e.attempt_id, e.reason) for e in ends] == [(a0.attempt_id, EndReason.SUPERSEDED)]


# -- relaunch together -----------------------------------------------------------------------


def test_once_every_node_is_down_the_next_generation_is_launched_whole() -> None:
    a0 = group_attempt(0, state=AttemptState.ENDED, end_reason=EndReason.SUPERSEDED)
    a1 = group_attempt(
        1, state=AttemptState.ENDED, end_reason=EndReason.PREEMPTED, noticed_at=NOW - 30
    )
    j = job(state=JobState.RECOVERING, attempts=(a0, a1), job_spec=two_node())
    ls = launches(decide(snapshot([j])))
    assert [(launch.node, launch.generation, launch.group_nnodes) for launch in ls] == [
        (0, 1, 2),
        (1, 1, 2),
    ]
    market = ls[0].candidates[0].market_id
    assert market.zone != ZONES[0]  # the preempted zone is suspected; one zone for the group
    assert ls[1].candidates[0].market_id == market
    assert "generation 1" in ls[0].reason


def test_the_job_succeeds_when_every_node_of_its_newest_generation_exited_0() -> None:
    old = group_attempt(0, state=AttemptState.ENDED, end_reason=EndReason.SUCCEEDED)
    a0 = group_attempt(0, generation=1, state=AttemptState.ENDED, end_reason=EndReason.SUCCEEDED)
    a1 = group_attempt(1, generation=1)
    j = job(attempts=(old, a0, a1), job_spec=two_node())
    events = [Exited(**stamp(a1), code=0)]
    states = [s.state for s in of_type(decide(snapshot([j], events=events)), SetJobState)]
    assert states[-1] is JobState.SUCCEEDED


def test_a_group_does_not_succeed_on_one_nodes_exit_while_another_was_lost() -> None:
    a0 = group_attempt(0, state=AttemptState.ENDED, end_reason=EndReason.SUCCEEDED)
    a1 = group_attempt(1, state=AttemptState.ENDED, end_reason=EndReason.PREEMPTED)
    j = job(attempts=(a0, a1), job_spec=two_node())
    actions = decide(snapshot([j]))
    assert [launch.generation for launch in launches(actions)] == [1, 1]


# -- shape -----------------------------------------------------------------------------------


def _lost_group(job_spec: Any, instance_type: str = A100, nnodes: int = 2) -> Any:
    ended = {"state": AttemptState.ENDED, "instance_type": instance_type}
    members = [
        group_attempt(n, nnodes=nnodes, end_reason=EndReason.SUPERSEDED, **ended)
        for n in range(nnodes)
    ]
    members[-1] = members[-1].with_(end_reason=EndReason.PREEMPTED)
    return job(state=JobState.RECOVERING, attempts=members, job_spec=job_spec)


ONE_OR_TWO_GPUS = {"any_of": [{"gpus_per_node": 1}, {"gpus_per_node": 2}]}


@pytest.mark.parametrize("resources", [None, ONE_OR_TWO_GPUS])
def test_a_group_that_is_not_reformable_waits_rather_than_change_its_shape(
    resources: dict[str, Any] | None,
) -> None:
    j = _lost_group(two_node(**({"resources": resources} if resources else {})))
    actions = decide(snapshot([j], view=view_of({A100X2: 2}, known={A100: 1})))
    assert not launches(actions)
    waiting = of_type(actions, Waiting)
    assert waiting and ("shape" in waiting[0].reason or "gpus_per_node" in waiting[0].reason)


def test_a_reformable_group_of_two_one_gpu_nodes_re_forms_to_one_node_of_two() -> None:
    j = _lost_group(two_node(resources=ONE_OR_TWO_GPUS, reformable=True, min_nodes=1, max_nodes=2))
    ls = launches(decide(snapshot([j], view=view_of({A100X2: 2}, known={A100: 1}))))
    assert [(launch.node, launch.group_nnodes) for launch in ls] == [(0, 1)]
    assert ls[0].candidates[0].offering.gpu_count == 2


def test_a_reformable_group_of_two_two_gpu_nodes_re_forms_to_three_of_one() -> None:
    j = _lost_group(
        two_node(resources=ONE_OR_TWO_GPUS, reformable=True, min_nodes=1, max_nodes=3),
        instance_type=A100X2,
    )
    ls = launches(decide(snapshot([j], view=view_of({A100: 1}, known={A100X2: 2}))))
    assert [launch.node for launch in ls] == [0, 1, 2]
    assert {launch.group_nnodes for launch in ls} == {3}


def test_a_reformable_group_keeps_its_shape_while_a_candidate_of_it_is_usable() -> None:
    j = _lost_group(two_node(resources=ONE_OR_TWO_GPUS, reformable=True, min_nodes=1, max_nodes=3))
    ls = launches(decide(snapshot([j], view=view_of({A100: 1, A100X2: 2}))))
    assert [(launch.group_nnodes, launch.candidates[0].offering.gpu_count) for launch in ls] == [
        (2, 1),
        (2, 1),
    ]


# -- the spec and the environment ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"num_nodes": 2, "min_nodes": 1}, "add 'reformable: true'"),
        ({"num_nodes": 4, "reformable": True, "max_nodes": 3}, "outside min_nodes..max_nodes"),
        ({"num_nodes": 2, "reformable": True, "min_nodes": 3}, "outside min_nodes..max_nodes"),
    ],
)
def test_group_bounds_that_do_not_hold_are_refused_naming_the_fix(
    fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(JobSpecError, match=expected):
        spec(**fields)


def test_a_reformable_spec_keeps_a_node_row_for_its_largest_shape() -> None:
    s = spec(num_nodes=2, reformable=True, min_nodes=1, max_nodes=3)
    assert s.grouped and s.node_bounds == (1, 3) and s.node_count == 3
    assert not spec().grouped and spec(num_nodes=2).grouped


def test_each_node_is_launched_with_its_groups_shape_and_waits_for_the_address(
    tmp_path: Any,
) -> None:
    group = GroupEnv(nnodes=2, nproc_per_node=1, generation=3, master_port=12345)
    boot = bootstrap(
        WorkerCommand(run="true"),
        job_id="j-1",
        node=1,
        attempt_id="a-1",
        provider="aws-sim",
        store_url="sqlite://",
        home=tmp_path,
        group=group,
    )
    assert deferred(boot.env)  # no MASTER_ADDR: the agent waits for the rendezvous
    assert "SKYPILOT_NODE_IPS" not in boot.env
    names = [n for n in group.env(1) if not n.startswith("SKYPILOT_")]
    assert {k: boot.env[k] for k in [*names, "SPOTHOP_NODE_RANK"]} == {
        "MASTER_PORT": "12345",
        "NODE_RANK": "1",
        "NNODES": "2",
        "NPROC_PER_NODE": "1",
        "WORLD_SIZE": "2",
        "SPOTHOP_NODE_RANK": "1",
        "SPOTHOP_NNODES": "2",
        "SPOTHOP_NPROC_PER_NODE": "1",
        "SPOTHOP_GROUP_GENERATION": "3",
    }


def test_each_generation_rendezvouses_on_a_port_of_its_own() -> None:
    ports = {group_port("j-1", g) for g in range(50)}
    assert len(ports) >= 45  # crc32 over 20,000 ports: collisions are rare
    assert group_port("j-1", 0) == group_port("j-1", 0)
    assert all(12_000 <= p < 32_000 for p in ports)


def test_a_stop_the_controller_asked_for_is_no_preemption_in_the_market_history(
    tmp_path: Any,
) -> None:
    from spothop.controlplane.store import StoreControlPlane
    from spothop.market.interruptions import InterruptionStore
    from spothop.wire.events import Interruption

    url = f"sqlite:///{tmp_path / 'store.db'}"
    for protocol, instance_id in (("control-plane", "i-stopped"), ("gcp", "i-preempted")):
        StoreControlPlane(url, instance_id).record(
            Interruption(
                instance_id=instance_id,
                provider="gcp-sim",
                region="us-central1",
                zone="us-central1-a",
                instance_type="g2-standard-4",
                protocol=protocol,
                notice_kind="final",
                cause="stop-requested" if protocol == "control-plane" else "preempted",
                notice_time_unix_s=1_800_000_000.0,
                lead_time_s=30.0,
            )
        )
    got = {i.instance_id for i in InterruptionStore(url).interruptions()}
    assert got == {"i-preempted"}


def test_a_generation_whose_launch_failed_is_relaunched_whole_on_another_market() -> None:
    failed = group_attempt(
        0,
        state=AttemptState.ENDED,
        end_reason=EndReason.LAUNCH_FAILED,
        error_code="ZONE_RESOURCE_POOL_EXHAUSTED",
        instance_id=None,
        running_at=None,
        ended_at=NOW - 5,
    )
    stopped = group_attempt(1, state=AttemptState.ENDED, end_reason=EndReason.SUPERSEDED)
    j = job(state=JobState.PROVISIONING, attempts=(failed, stopped), job_spec=two_node())
    ls = launches(decide(snapshot([j])))
    assert [(launch.node, launch.generation) for launch in ls] == [(0, 1), (1, 1)]
    assert {launch.candidates[0].market_id for launch in ls} != {failed.market}
    assert len({launch.candidates[0].market_id for launch in ls}) == 1


def test_a_launch_failure_stops_the_nodes_of_its_generation_that_started() -> None:
    failed = group_attempt(
        0,
        state=AttemptState.ENDED,
        end_reason=EndReason.LAUNCH_FAILED,
        instance_id=None,
        running_at=None,
        ended_at=NOW - 5,
    )
    started = group_attempt(1, state=AttemptState.PENDING)
    j = job(state=JobState.PROVISIONING, attempts=(failed, started), job_spec=two_node())
    actions = decide(snapshot([j]))
    assert not launches(actions)
    assert [s.instance_id for s in of_type(actions, RequestStop)] == [started.instance_id]


def test_a_worker_that_fails_because_its_peer_was_lost_ends_with_its_group_not_as_a_failure() -> (
    None
):
    from spothop.providers.base import InstanceState
    from tests.jobs.controller.factories import instance_of

    a0, a1 = group_attempt(0), group_attempt(1)
    j = job(attempts=(a0, a1), job_spec=two_node())
    instances = {
        a0.instance_id: instance_of(a0),
        a1.instance_id: instance_of(a1, InstanceState.FAILED, ended_at=NOW - 2),
    }
    events = [Exited(**stamp(a0), code=1)]  # its collective broke when node 1's machine died
    actions = decide(snapshot([j], events=events, instances=instances))
    ends = {e.attempt_id: e.reason for e in of_type(actions, EndAttempt)}
    assert ends == {a0.attempt_id: EndReason.SUPERSEDED, a1.attempt_id: EndReason.FAILED}
    assert JobState.FAILED not in [s.state for s in of_type(actions, SetJobState)]


def test_the_executor_launches_a_group_node_with_its_shape_and_no_address(tmp_path: Any) -> None:
    """No provider knows node 0's address before it boots: the launch gives the node its rank,
    the group's shape and port, and leaves MASTER_ADDR to the rendezvous (its agent waits)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock())
    executor = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    try:
        job_id = store.create_job(spec(num_nodes=2))
        offering = provider.list_offerings()[0]
        candidate = Candidate(offering, MarketKind.SPOT, 1.0, 0.05, 100.0, 0.9, 0.0, 0.01)
        launch = Launch(job_id, 1, (candidate,), "tok-g", "group", generation=2, group_nnodes=2)
        assert executor.step(launch).ok
        wait_for(lambda: not executor.launching(), 10, what="the launch to end")
        (attempt,) = store.attempts(job_id)
        assert (attempt.generation, attempt.group_nnodes) == (2, 2)
        assert attempt.group_nproc_per_node == max(1, offering.gpu_count)
        assert attempt.end_reason is None
        (request,) = provider.requests
        assert "MASTER_ADDR" not in request.env and "SKYPILOT_NODE_IPS" not in request.env
        assert deferred(request.env)
        assert request.env["MASTER_PORT"] == str(group_port(job_id, 2))
        assert (request.env["NODE_RANK"], request.env["SPOTHOP_GROUP_GENERATION"]) == ("1", "2")
        assert request.env["NNODES"] == "2"
    finally:
        executor.close()
        store.close()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"spread": {"min_zones": 2}}, "spread is for batch workers"),
        (
            {"reserved": [{"provider": "fake", "instance_type": A100}]},
            "reserved pools are not used by multi-node tasks",
        ),
    ],
)
def test_what_a_group_does_not_use_is_refused_rather_than_ignored(
    fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(JobSpecError, match=expected):
        spec(num_nodes=2, **fields)


def test_the_ddp_examples_job_file_is_a_checkpointed_two_node_group() -> None:
    from pathlib import Path

    from spothop.jobs.spec import load_job

    folder = Path(__file__).resolve().parents[2] / "examples" / "ddp"
    s = load_job(folder / "job.yaml")
    assert s.grouped and s.num_nodes == 2 and not s.reformable
    bucket = folder.parent / ".buckets" / "demo"  # the demo world's bucket: every instance sees it
    assert s.checkpoint is not None and s.checkpoint.url == str(bucket / "ddp" / "ckpt")
    assert s.run is not None and "train.py" in s.run
