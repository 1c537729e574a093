"""decide on agent liveness: agents that never register, or stop beating, are lost (liveness.py)."""

from __future__ import annotations

from dataclasses import replace

from spothop.jobs.controller import EndAttempt, SetJobState, Terminate, decide
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.liveness import lost_loop
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.providers.base import InstanceState
from tests.jobs.controller.factories import (
    NOW,
    PROVIDER,
    attempt,
    ended,
    instance_of,
    job,
    launches,
    of_type,
    snapshot,
)

BOOT_DEADLINE_S = 600.0
CONFIG = ControllerConfig()  # heartbeats every 10 s, lost after 9 missed (90 s)


def _watched(jobs, **kw):  # type: ignore[no-untyped-def]
    return replace(snapshot(jobs, **kw), boot_deadlines_s={PROVIDER: BOOT_DEADLINE_S})


def _booting(launched_ago_s: float, **fields: object):  # type: ignore[no-untyped-def]
    return attempt(
        state=AttemptState.PENDING, launched_at=NOW - launched_ago_s, running_at=None, **fields
    )


def test_an_agent_never_registered_past_the_boot_deadline_is_lost_terminated_and_relaunched() -> (
    None
):
    silent = _booting(BOOT_DEADLINE_S + 1)
    actions = decide(_watched([job(attempts=[silent])]), CONFIG)
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.AGENT_LOST and "did not register" in end.detail
    assert "cannot reach the control plane (a security group or firewall" in end.detail
    assert [t.instance_id for t in of_type(actions, Terminate)] == [silent.instance_id]
    assert len(launches(actions)) >= 1  # the job's policy relaunches the node
    assert JobState.FAILED not in [s.state for s in of_type(actions, SetJobState)]


def test_within_the_boot_deadline_an_unregistered_agent_is_waited_for() -> None:
    booting = _booting(BOOT_DEADLINE_S - 1)
    assert not of_type(decide(_watched([job(attempts=[booting])]), CONFIG), EndAttempt)


def test_heartbeats_that_stop_past_the_deadline_lose_the_agent() -> None:
    stale = attempt(beat_at=NOW - CONFIG.heartbeat_deadline_s - 1)
    actions = decide(_watched([job(attempts=[stale])]), CONFIG)
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.AGENT_LOST and "heartbeats stopped" in end.detail
    assert of_type(actions, Terminate)


def test_a_registered_beating_agent_is_never_lost() -> None:
    beating = attempt(beat_at=NOW - CONFIG.heartbeat_interval_s)  # launched an hour ago
    assert decide(_watched([job(attempts=[beating])]), CONFIG) == []


def test_an_unwatched_provider_a_simulation_is_never_lost() -> None:
    silent = _booting(10 * BOOT_DEADLINE_S)  # the snapshot declares no boot deadline
    assert not of_type(decide(snapshot([job(attempts=[silent])]), CONFIG), EndAttempt)


def test_a_noticed_or_unlisted_instance_is_left_to_the_clouds_rules() -> None:
    noticed = attempt(state=AttemptState.NOTICED, notice_final=True, noticed_at=NOW - 5)
    actions = decide(_watched([job(attempts=[noticed])]), CONFIG)
    assert EndReason.AGENT_LOST not in [e.reason for e in of_type(actions, EndAttempt)]
    gone = _booting(BOOT_DEADLINE_S + 1)
    listed = {gone.instance_id: instance_of(gone, InstanceState.TERMINATED)}
    actions = decide(_watched([job(attempts=[gone])], instances=listed), CONFIG)
    assert [e.reason for e in of_type(actions, EndAttempt)] == [EndReason.TERMINATED]


def test_the_config_overrides_the_boot_deadline_and_the_floor_holds_an_accelerated_one() -> None:
    booting = _booting(120)
    short = replace(CONFIG, boot_deadline_s=60.0)
    assert of_type(decide(_watched([job(attempts=[booting])]), short), EndAttempt)
    # An accelerated cloud's 600 s at speed 5 reads 120 s on the controller's clock: the boot's
    # install takes wall time, so the floor (300 s) holds it.
    fast = replace(snapshot([job(attempts=[booting])]), boot_deadlines_s={PROVIDER: 120.0})
    assert not of_type(decide(fast, CONFIG), EndAttempt)
    late = _booting(CONFIG.boot_deadline_floor_s + 1)
    fast = replace(snapshot([job(attempts=[late])]), boot_deadlines_s={PROVIDER: 120.0})
    assert of_type(decide(fast, CONFIG), EndAttempt)


def _lost(n: int, registered: bool = False):  # type: ignore[no-untyped-def]
    return ended(
        EndReason.AGENT_LOST,
        n=n,
        launched_at=NOW - 5000 + n * 700,
        error_message=f"its agent did not register; console: boot {n} | pip: no route to host",
        beat_at=NOW - 4000 if registered else None,
    )


def test_three_lost_agents_in_a_row_fail_the_job_with_the_console_tail() -> None:
    j = job(state=JobState.RECOVERING, attempts=[_lost(0), _lost(1), _lost(2)])
    actions = decide(_watched([j]), CONFIG)
    assert not launches(actions)
    failed = [s for s in of_type(actions, SetJobState) if s.state is JobState.FAILED]
    assert failed and "lost 3 times" in failed[0].reason
    assert "boot 2 | pip: no route to host" in failed[0].reason


def test_a_loop_ended_in_this_pass_fails_with_a_stored_console_tail() -> None:
    # The last attempt's console is read when its end is written, after decide: the loop's
    # failure shows the newest console already stored (the same failure, N times in a row).
    folded = ended(EndReason.AGENT_LOST, n=2, launched_at=NOW - 100, error_message=None)
    reason = lost_loop(job(attempts=[_lost(0), _lost(1), folded]), 3)
    assert reason is not None and "boot 1 | pip: no route to host" in reason


def test_a_loop_is_broken_by_an_agent_that_registered_or_by_another_end() -> None:
    assert lost_loop(job(attempts=[_lost(0), _lost(1)]), 3) is None
    assert lost_loop(job(attempts=[_lost(0), _lost(1, registered=True), _lost(2)]), 3) is None
    other = ended(EndReason.PREEMPTED, n=3, launched_at=NOW - 100)
    assert lost_loop(job(attempts=[_lost(0), _lost(1), _lost(2), other]), 3) is None
    assert lost_loop(job(attempts=[_lost(0), _lost(1), _lost(2)]), 0) is None
    two = job(state=JobState.RECOVERING, attempts=[_lost(0), _lost(1)])
    actions = decide(_watched([two]), CONFIG)
    assert launches(actions)  # two losses: relaunched, not failed


def test_a_controller_that_just_started_gives_its_agents_the_deadlines_from_its_start() -> None:
    stale = attempt(beat_at=NOW - 3000)  # beat before the controller went down
    silent = _booting(BOOT_DEADLINE_S + 1, job_id="j-2")
    jobs = [job(attempts=[stale]), job(job_id="j-2", attempts=[silent])]
    restarted = replace(_watched(jobs), controller_started_at=NOW - 30)
    assert not of_type(decide(restarted, CONFIG), EndAttempt)
    later = replace(restarted, controller_started_at=NOW - BOOT_DEADLINE_S - 1)
    ends = of_type(decide(later, CONFIG), EndAttempt)
    assert sorted(e.reason for e in ends) == [EndReason.AGENT_LOST] * 2
