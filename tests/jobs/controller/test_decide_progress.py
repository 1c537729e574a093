"""decide ends a job that cannot progress or has spent its budget (progress.py), never relaunching
and billing in a loop; a job that progresses, or waits for capacity, is left to run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.jobs.controller import SetJobState, Terminate, decide
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.progress import budget_why, spent_usd, spin_why
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.queue.model import QueueStats
from tests.jobs.controller.factories import (
    NOW,
    attempt,
    ended,
    job,
    launches,
    of_type,
    snapshot,
    spec,
)

CONFIG = ControllerConfig()
LIMIT = CONFIG.no_progress_limit


def _failed_states(actions: list[object]) -> list[SetJobState]:
    return [s for s in of_type(actions, SetJobState) if s.state is JobState.FAILED]


def _boot_failed(n: int) -> object:
    return ended(
        EndReason.FAILED,
        n=n,
        running_at=None,
        ended_at=NOW - 100 + n,
        error_message="boot script failed: exit 1",
    )


def test_instances_failing_at_boot_again_and_again_fail_the_job_with_the_cause() -> None:
    actions = decide(snapshot([job(attempts=[_boot_failed(n) for n in range(LIMIT)])]), CONFIG)
    (failed,) = _failed_states(actions)
    assert "failed 3 times in a row before its worker ran" in failed.reason
    assert "boot script failed: exit 1" in failed.reason
    assert not launches(actions)


def test_one_boot_failure_fewer_is_relaunched() -> None:
    actions = decide(snapshot([job(attempts=[_boot_failed(n) for n in range(LIMIT - 1)])]), CONFIG)
    assert not _failed_states(actions) and launches(actions)


def _batch(pending: int, claims: int, exits: int) -> object:
    stats = QueueStats("j-1", pending, 0, 0, 0, claims, 0, 0, 0)
    attempts = [
        ended(EndReason.SUCCEEDED, n=n, ended_at=NOW - 100 + n, exit_code=0) for n in range(exits)
    ]
    return job(
        job_spec=spec(kind="batch", workers=1), attempts=attempts, queue=stats, shards_enqueued=True
    )


def test_a_batch_worker_exiting_0_without_claiming_a_shard_fails_the_job() -> None:
    actions = decide(snapshot([_batch(pending=2, claims=0, exits=LIMIT)]), CONFIG)
    (failed,) = _failed_states(actions)
    assert "exited 0 3 times in a row with 2 shard(s) pending" in failed.reason
    assert not launches(actions)


def test_a_batch_worker_that_claims_shards_is_relaunched() -> None:
    actions = decide(snapshot([_batch(pending=2, claims=5, exits=LIMIT)]), CONFIG)
    assert not _failed_states(actions) and launches(actions)


def test_spend_reaching_the_budget_fails_the_job_and_stops_its_instance() -> None:
    running = attempt(price_usd_per_hour=2.0)  # up an hour: $2 spent
    j = job(job_spec=spec(budget_usd=1.5), attempts=[running])
    actions = decide(snapshot([j]), CONFIG)
    (failed,) = _failed_states(actions)
    assert failed.reason.startswith("budget_usd reached: $2.0000 spent of $1.5")
    assert [t.instance_id for t in of_type(actions, Terminate)] == [running.instance_id]


def test_no_launch_that_would_pass_the_budget() -> None:
    gone = ended(EndReason.PREEMPTED, price_usd_per_hour=1.0, launched_at=NOW - 3590)
    j = job(job_spec=spec(budget_usd=1.0), attempts=[gone], state=JobState.RECOVERING)
    actions = decide(snapshot([j]), CONFIG)
    assert not launches(actions)
    (failed,) = _failed_states(actions)
    assert "the next launch (at least $0.0167" in failed.reason


def test_a_job_under_its_budget_runs_on() -> None:
    running = attempt(price_usd_per_hour=1.0)
    j = job(job_spec=spec(budget_usd=100), attempts=[running])
    assert not _failed_states(decide(snapshot([j]), CONFIG))


@settings(max_examples=100, deadline=None)
@given(
    budget=st.floats(min_value=0.01, max_value=1000),
    prices=st.lists(st.floats(min_value=0.01, max_value=100), min_size=1, max_size=6),
    spans=st.lists(st.floats(min_value=0, max_value=48 * 3600), min_size=6, max_size=6),
)
def test_the_budget_rule_fails_a_job_exactly_when_its_spend_or_next_launch_passes_it(
    budget: float, prices: list[float], spans: list[float]
) -> None:
    attempts = [
        ended(
            EndReason.PREEMPTED,
            n=i,
            price_usd_per_hour=p,
            launched_at=NOW - spans[i] - 1,
            ended_at=NOW - 1,
        )
        for i, p in enumerate(prices)
    ]
    j = job(job_spec=spec(budget_usd=budget), attempts=attempts)
    spent = spent_usd(j, NOW)
    assert abs(spent - sum(p * (s / 3600) for p, s in zip(prices, spans, strict=False))) < 1e-6
    next_least = min(prices) / 60
    assert (budget_why(j, NOW) is not None) == (spent + next_least > budget)
    assert spin_why(j, LIMIT) is None  # preemptions are no spin: the job waits or relaunches


def test_a_capacity_shortage_is_never_a_reason_to_fail() -> None:
    fails = [
        ended(EndReason.LAUNCH_FAILED, n=n, instance_id=None, error_code="InsufficientCapacity")
        for n in range(10)
    ]
    j = job(attempts=fails, state=JobState.PENDING)
    assert spin_why(j, LIMIT) is None and budget_why(j, NOW) is None
    assert all(a.state is AttemptState.ENDED for a in fails)


def test_a_success_past_the_deadline_says_by_how_much_it_missed_it() -> None:
    done = ended(EndReason.SUCCEEDED, exit_code=0)
    late = job(job_spec=spec(deadline="1h"), attempts=[done], created_at=NOW - 7200)
    (moved,) = [s for s in of_type(decide(snapshot([late]), CONFIG), SetJobState)]
    assert moved.state is JobState.SUCCEEDED
    assert moved.reason.endswith("; its deadline (60 min from launch) was missed by 60 min")
    on_time = job(job_spec=spec(deadline="3h"), attempts=[done], created_at=NOW - 7200)
    (moved,) = [s for s in of_type(decide(snapshot([on_time]), CONFIG), SetJobState)]
    assert "missed" not in moved.reason
