"""decide on worker exits, batch queues, cancellation and orphan instances."""

from __future__ import annotations

from spothop.jobs.controller import (
    EndAttempt,
    EnqueueShards,
    PublishOutputs,
    SetJobState,
    Terminate,
    UpdateAttempt,
    decide,
)
from spothop.jobs.controller.snapshot import TAG_JOB
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, interrupted
from spothop.providers.base import InstanceState
from spothop.wire.events import Exited, FinalNotice, WorkerExited
from tests.jobs.controller.factories import (
    NOW,
    ZONES,
    attempt,
    ended,
    instance_of,
    job,
    launches,
    of_type,
    queue,
    snapshot,
    spec,
    stamp,
)


def _exit(code: int, **job_fields: object):  # type: ignore[no-untyped-def]
    running = attempt()
    j = job(attempts=[running], **job_fields)
    return decide(snapshot([j], events=[Exited(**stamp(running), code=code)])), running


def test_exit_0_ends_the_node_done_and_a_task_job_succeeds() -> None:
    actions, running = _exit(0)
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.SUCCEEDED and end.exit_code == 0
    assert of_type(actions, Terminate)[0].instance_id == running.instance_id
    assert of_type(actions, SetJobState)[-1].state is JobState.SUCCEEDED
    assert not launches(actions)


def test_a_two_node_job_succeeds_only_when_both_are_done() -> None:
    two = spec(num_nodes=2)
    done0 = ended(EndReason.SUCCEEDED, node=0, n=0, exit_code=0)
    running1 = attempt(node=1, n=1)
    actions = decide(snapshot([job(attempts=[done0, running1], job_spec=two)]))
    assert actions == []
    done1 = ended(EndReason.SUCCEEDED, node=1, n=1, exit_code=0)
    actions = decide(snapshot([job(attempts=[done0, done1], job_spec=two)]))
    assert [a.state for a in of_type(actions, SetJobState)] == [JobState.SUCCEEDED]


def test_exit_75_after_a_notice_is_preempted_and_resumable_the_node_is_relaunched() -> None:
    running = attempt()
    events = [FinalNotice(**stamp(running), protocol="aws"), Exited(**stamp(running), code=75)]
    actions = decide(snapshot([job(attempts=[running])], events=events))
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.PREEMPTED and end.exit_code == 75
    # The notice is written as a state of its own even when the exit comes in the same pass:
    # the job's events say attempt_noticed before attempt_ended however the passes fell.
    noticed = of_type(actions, UpdateAttempt)[0]
    assert noticed.state is AttemptState.NOTICED
    assert actions.index(noticed) < actions.index(end)
    assert len(launches(actions)) == 1
    assert of_type(actions, SetJobState)[-1].state is JobState.RECOVERING


def test_exit_75_on_an_instance_the_cloud_lists_preempted_is_a_preemption() -> None:
    running = attempt()
    taken = {running.instance_id or "": instance_of(running, InstanceState.PREEMPTED)}
    events = [Exited(**stamp(running), code=75)]
    actions = decide(snapshot([job(attempts=[running])], events=events, instances=taken))
    assert of_type(actions, EndAttempt)[0].reason is EndReason.PREEMPTED


def test_a_workers_own_exit_75_with_no_notice_is_requeued_relaunched_not_an_interruption() -> None:
    actions, _ = _exit(75)
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.REQUEUED and end.exit_code == 75
    assert not interrupted(end.reason, notice_final=False)
    assert len(launches(actions)) == 1
    assert of_type(actions, SetJobState)[-1].state is JobState.RECOVERING


def test_a_worker_that_exits_75_with_no_notice_again_and_again_fails_the_job() -> None:
    """The issue's case: a run that exits 75 on every instance was relaunched about once a
    second, billed, for ever; three in a row now fail the job with the reason."""
    before = [ended(EndReason.REQUEUED, n=i, exit_code=75) for i in range(2)]
    third = attempt(n=2)
    j = job(attempts=[*before, third])
    actions = decide(snapshot([j], events=[Exited(**stamp(third), code=75)]))
    assert not launches(actions)
    state = of_type(actions, SetJobState)[-1]
    assert state.state is JobState.FAILED
    assert "exited 75 3 times in a row with no notice" in state.reason
    # Two in a row, or a preemption between them, are relaunched as before.
    mixed = [ended(EndReason.REQUEUED, n=0, exit_code=75), ended(EndReason.PREEMPTED, n=1)]
    j = job(attempts=[*mixed, third])
    assert launches(decide(snapshot([j], events=[Exited(**stamp(third), code=75)])))


def _agent_exit_after_worker(code: int):  # type: ignore[no-untyped-def]
    """The agent's events for a worker that exited ``code`` (0 restarts left): the worker's
    exit, then the agent's own (1: the worker failed, whatever its code)."""
    running = attempt()
    events = [WorkerExited(**stamp(running), code=code), Exited(**stamp(running), code=1)]
    return decide(snapshot([job(attempts=[running])], events=events))


def test_a_workers_exit_75_behind_the_agents_exit_1_is_relaunched() -> None:
    actions = _agent_exit_after_worker(75)
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.REQUEUED and end.exit_code == 75
    assert len(launches(actions)) == 1


def test_a_workers_exit_3_is_kept_as_3_not_the_agents_1() -> None:
    actions = _agent_exit_after_worker(3)
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.WORKER_FAILED and end.exit_code == 3
    state = of_type(actions, SetJobState)[-1]
    assert state.state is JobState.FAILED and "exit 3" in state.reason


def test_another_exit_is_retried_up_to_max_retries_then_the_job_fails() -> None:
    actions, _ = _exit(3, job_spec=spec(max_retries=1))
    assert of_type(actions, EndAttempt)[0].reason is EndReason.WORKER_FAILED
    assert len(launches(actions)) == 1
    failed_once = ended(EndReason.WORKER_FAILED, n=0, exit_code=3)
    again = attempt(n=1)
    j = job(attempts=[failed_once, again], job_spec=spec(max_retries=1))
    actions = decide(snapshot([j], events=[Exited(**stamp(again), code=3)]))
    assert not launches(actions)
    state = of_type(actions, SetJobState)[-1]
    assert state.state is JobState.FAILED
    assert "exit 3" in state.reason and "max_retries is 1" in state.reason


def test_with_no_retries_the_first_failure_fails_the_job() -> None:
    actions, _ = _exit(1)
    assert of_type(actions, SetJobState)[-1].state is JobState.FAILED


# -- batch jobs -------------------------------------------------------------------------------


def _batch(**fields: object):  # type: ignore[no-untyped-def]
    workers = [attempt(node=i, n=i, zone=ZONES[i % 3]) for i in range(4)]
    base = {"attempts": workers, "job_spec": spec(kind="batch"), "shards_enqueued": True}
    return job(**{**base, **fields})


def test_a_batch_job_with_shards_left_keeps_its_workers() -> None:
    assert decide(snapshot([_batch(queue=queue(pending=100, leased=4))])) == []


def test_a_drained_queue_publishes_the_outputs_and_releases_the_workers() -> None:
    actions = decide(snapshot([_batch(queue=queue(pending=0, leased=0, done=200))]))
    assert actions[0] == PublishOutputs("j-1")
    assert len(of_type(actions, Terminate)) == 4
    assert not of_type(actions, SetJobState)


def test_a_worker_still_launching_is_released_only_once_its_instance_is_known() -> None:
    """Its launch call may be under way: ended now, the instance it returns would be known by tag only."""
    workers = [attempt(node=i, n=i, zone=ZONES[i % 3]) for i in range(3)]
    launching = attempt(
        node=3, n=3, state=AttemptState.LAUNCHING, instance_id=None, launched_at=NOW - 5
    )
    drained = queue(pending=0, leased=0, done=200)
    actions = decide(snapshot([_batch(attempts=[*workers, launching], queue=drained)]))
    assert launching.attempt_id not in {e.attempt_id for e in of_type(actions, EndAttempt)}
    assert len(of_type(actions, Terminate)) == 3
    succeeded = _batch(
        state=JobState.SUCCEEDED,
        attempts=[launching.with_(instance_id="i-late", state=AttemptState.PENDING)],
        queue=drained,
        outputs_published=True,
    )
    actions = decide(snapshot([succeeded]))
    assert [t.instance_id for t in of_type(actions, Terminate)] == ["i-late"]
    assert [e.attempt_id for e in of_type(actions, EndAttempt)] == [launching.attempt_id]


def test_published_outputs_succeed_the_batch_job() -> None:
    j = _batch(attempts=[], queue=queue(pending=0, leased=0, done=200), outputs_published=True)
    actions = decide(snapshot([j]))
    assert [a.state for a in of_type(actions, SetJobState)] == [JobState.SUCCEEDED]


def test_dead_shards_past_the_allowance_fail_the_job_listing_them() -> None:
    j = _batch(queue=queue(pending=50, leased=4, dead=2), dead_shards=("s-0007", "s-0123"))
    actions = decide(snapshot([j]))
    state = of_type(actions, SetJobState)[-1]
    assert state.state is JobState.FAILED
    assert "2 shards were dead-lettered (allow_failed_shards: 0): s-0007, s-0123" in state.reason
    assert len(of_type(actions, Terminate)) == 4


def test_dead_shards_within_the_allowance_let_the_job_succeed() -> None:
    allowing = spec(
        kind="batch",
        batch={"inputs": ["s3://in/*.jsonl"], "output": "s3://out/x", "allow_failed_shards": 2},
    )
    j = _batch(
        attempts=[],
        job_spec=allowing,
        queue=queue(pending=0, leased=0, done=198, dead=2),
        dead_shards=("a", "b"),
        outputs_published=True,
    )
    assert [a.state for a in of_type(decide(snapshot([j])), SetJobState)] == [JobState.SUCCEEDED]


def test_idle_workers_are_released_when_nothing_is_left_to_claim() -> None:
    j = _batch(queue=queue(pending=0, leased=2), busy_instances=frozenset({"i-j-1-0", "i-j-1-1"}))
    actions = decide(snapshot([j]))
    assert sorted(t.instance_id for t in of_type(actions, Terminate)) == ["i-j-1-2", "i-j-1-3"]
    ends = of_type(actions, EndAttempt)
    assert {e.reason for e in ends} == {EndReason.SUCCEEDED}
    assert not launches(actions)


def test_a_lost_worker_is_replaced_only_while_shards_are_left() -> None:
    workers = [attempt(node=i, n=i, zone=ZONES[i % 3]) for i in range(3)]
    lost = ended(EndReason.PREEMPTED, node=3, n=3, noticed_at=NOW - 20)
    many = _batch(attempts=[*workers, lost], queue=queue(pending=100, leased=3))
    (launch,) = launches(decide(snapshot([many])))
    assert launch.node == 3
    few = _batch(attempts=[*workers, lost], queue=queue(pending=0, leased=3))
    assert not launches(decide(snapshot([few])))


def test_a_pending_batch_job_enqueues_its_shards_once() -> None:
    fresh = job(state=JobState.PENDING, job_spec=spec(kind="batch"))
    assert of_type(decide(snapshot([fresh])), EnqueueShards) == [EnqueueShards("j-1")]
    enqueued = fresh.with_(shards_enqueued=True, queue=queue(pending=10, leased=0))
    assert not of_type(decide(snapshot([enqueued])), EnqueueShards)


# -- cancel, terminal jobs, orphans ------------------------------------------------------------


def test_cancel_terminates_every_instance_and_cancels_the_job() -> None:
    j = _batch(cancel_requested=True, queue=queue())
    actions = decide(snapshot([j]))
    assert len(of_type(actions, Terminate)) == 4
    assert {e.reason for e in of_type(actions, EndAttempt)} == {EndReason.CANCELLED}
    assert actions[-1] == SetJobState("j-1", JobState.CANCELLED, "cancelled by the user")


def test_cancelling_a_pending_job_launches_nothing() -> None:
    actions = decide(snapshot([job(state=JobState.PENDING, cancel_requested=True)]))
    assert [type(a) for a in actions] == [SetJobState]


def test_a_finished_job_with_a_live_instance_releases_it_and_stays_finished() -> None:
    leftover = attempt()
    actions = decide(snapshot([job(state=JobState.SUCCEEDED, attempts=[leftover])]))
    assert of_type(actions, Terminate)[0].instance_id == leftover.instance_id
    assert not of_type(actions, SetJobState)


def test_an_instance_tagged_by_spothop_that_no_attempt_owns_is_terminated() -> None:
    ghost = instance_of(attempt(job_id="j-gone"), launched_at=NOW - 3600)
    untagged = instance_of(attempt(job_id="j-other"), launched_at=NOW - 3600, tags={})
    world = snapshot([], instances={ghost.instance_id: ghost, untagged.instance_id: untagged})
    (terminate,) = decide(world)
    assert isinstance(terminate, Terminate)
    assert terminate.instance_id == ghost.instance_id and "orphan" in terminate.reason
    assert TAG_JOB in ghost.tags


def test_a_just_launched_instance_is_not_an_orphan_yet() -> None:
    ghost = instance_of(attempt(job_id="j-gone"), launched_at=NOW - 5)
    assert decide(snapshot([], instances={ghost.instance_id: ghost})) == []


def test_a_preempted_instance_is_left_to_its_deadline() -> None:
    gone = ended(EndReason.PREEMPTED, notice_final=True, notice_deadline_s=NOW + 20)
    j = job(state=JobState.RECOVERING, attempts=[gone])
    still_up = instance_of(gone, InstanceState.NOTICED)
    actions = decide(snapshot([j], instances={still_up.instance_id: still_up}))
    assert not of_type(actions, Terminate)
    past = gone.with_(notice_deadline_s=NOW - 60)
    actions = decide(
        snapshot([j.with_(attempts=(past,))], instances={still_up.instance_id: still_up})
    )
    assert of_type(actions, Terminate)[0].instance_id == gone.instance_id


def test_an_ended_attempts_live_instance_is_terminated() -> None:
    won = attempt(n=1, zone=ZONES[1])
    lost_race = ended(EndReason.SUPERSEDED, n=0)
    j = job(attempts=[lost_race, won])
    extra = instance_of(lost_race)
    world = snapshot([j], instances={extra.instance_id: extra, won.instance_id: instance_of(won)})
    assert [t.instance_id for t in of_type(decide(world), Terminate)] == [lost_race.instance_id]


def test_two_running_attempts_of_one_node_keep_the_first_that_ran() -> None:
    first = attempt(n=0, running_at=NOW - 100)
    second = attempt(n=1, zone=ZONES[1], running_at=NOW - 50)
    actions = decide(snapshot([job(state=JobState.PROVISIONING, attempts=[first, second])]))
    assert [t.instance_id for t in of_type(actions, Terminate)] == [second.instance_id]
    assert of_type(actions, EndAttempt)[0].reason is EndReason.SUPERSEDED
    assert AttemptState.RUNNING is first.state


def test_an_exit_code_its_agent_reported_wins_over_the_instance_having_gone() -> None:
    finished = attempt(exit_code=0)
    gone = {finished.instance_id or "": instance_of(finished, InstanceState.TERMINATED)}
    actions = decide(snapshot([job(attempts=[finished])], instances=gone))
    assert of_type(actions, EndAttempt)[0].reason is EndReason.SUCCEEDED
    assert of_type(actions, SetJobState)[-1].state is JobState.SUCCEEDED
    vanished = decide(snapshot([job(attempts=[attempt(exit_code=75)])], instances={}))
    assert of_type(vanished, EndAttempt)[0].reason is EndReason.REQUEUED
    assert launches(vanished)


def test_a_worker_that_exited_in_setup_ends_its_attempt_as_setup_failed() -> None:
    running = attempt()
    events = [
        WorkerExited(**stamp(running), code=9, phase="setup"),
        Exited(**stamp(running), code=1),
    ]
    actions = decide(snapshot([job(attempts=[running])], events=events))
    end = of_type(actions, EndAttempt)[0]
    assert end.reason is EndReason.WORKER_FAILED and end.exit_code == 9
    assert "setup failed (exit 9)" in end.detail
    state = of_type(actions, SetJobState)[-1]
    assert state.state is JobState.FAILED and "setup failed (exit 9)" in state.reason


def test_a_worker_that_exited_in_run_is_a_failed_worker_not_a_failed_setup() -> None:
    running = attempt()
    events = [WorkerExited(**stamp(running), code=4, phase="run"), Exited(**stamp(running), code=1)]
    end = of_type(decide(snapshot([job(attempts=[running])], events=events)), EndAttempt)[0]
    assert "the worker failed (exit 4)" in end.detail and "setup" not in end.detail


def test_a_setup_exit_told_in_an_earlier_pass_still_names_setup() -> None:
    # The worker's exit was folded into the attempt's facts before the agent's own exit came.
    running = attempt(exit_code=9, worker_phase="setup")
    actions = decide(snapshot([job(attempts=[running])], events=[Exited(**stamp(running), code=1)]))
    end = of_type(actions, EndAttempt)[0]
    assert end.exit_code == 9 and end.detail == "setup failed (exit 9)"
