"""The executor against the fake provider and a real job store: attempts before launches, failover."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spothop.errors import CapacityUnavailable
from spothop.jobs.controller import Launch, Terminate
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.observe import TAG_JOB, TAG_NODE, TAG_STORE, TAG_TOKEN, store_tag
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.base import Instance, InstanceState, LaunchRequest
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.waiting import wait_for


def _candidate(offering: Any, kind: MarketKind = MarketKind.SPOT) -> Candidate:
    return Candidate(
        offering=offering,
        market_kind=kind,
        price_usd_per_hour=1.0,
        preemption_rate_per_h=0.05,
        effective_tflops=100.0,
        goodput=0.9,
        egress_usd=0.0,
        score=0.01,
    )


class Recording(FakeProvider):
    """A fake provider that checks, at each launch call, that the attempt is already stored."""

    def __init__(self, store: JobStore, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.seen_at_launch: list[Any] = []

    def launch(self, request: LaunchRequest) -> Instance:
        self.seen_at_launch.append(self.store.attempt_by_token(request.tags[TAG_TOKEN]))
        return super().launch(request)


@pytest.fixture
def world(tmp_path: Path) -> tuple[JobStore, Recording, ManualClock, Executor, str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    clock = ManualClock()
    offerings = make_offerings()
    provider = Recording(store, markets=[make_market(o) for o in offerings], clock=clock)
    executor = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    spec = load_job({"name": "t", "run": "echo hi", "envs": {"A": "1"}})
    job_id = store.create_job(spec)
    yield store, provider, clock, executor, job_id
    executor.close()
    store.close()


def test_a_launch_writes_its_attempt_with_tags_before_the_cloud_call(world: Any) -> None:
    store, provider, _, executor, job_id = world
    offering = provider.list_offerings()[0]
    report = executor.step(Launch(job_id, 0, (_candidate(offering),), "tok-1", "first launch"))
    assert report.ok, report.error
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    (seen,) = provider.seen_at_launch
    assert seen is not None and seen.state is AttemptState.LAUNCHING
    (request,) = provider.requests
    assert request.tags[TAG_JOB] == job_id and request.tags[TAG_NODE] == "0"
    assert request.tags[TAG_STORE] == store_tag(executor.store_url)
    assert request.env["A"] == "1" and request.env["SPOTHOP_JOB_ID"] == job_id
    assert "spothop.agent" in request.bootstrap_command
    (attempt,) = store.attempts(job_id)
    assert attempt.state is AttemptState.PENDING and attempt.instance_id is not None
    # Replayed: the same token is refused, nothing is launched twice.
    again = executor.step(Launch(job_id, 0, (_candidate(offering),), "tok-1", "replay"))
    assert again.ok and "skipped" in again.detail
    assert len(provider.requests) == 1


def test_in_order_launch_moves_past_refusals_and_records_each_code(world: Any) -> None:
    store, provider, _, executor, job_id = world
    offerings = provider.list_offerings()
    provider.fail_next(
        CapacityUnavailable(provider.name, "FakeCapacityUnavailable", "none left"), times=2
    )
    candidates = tuple(_candidate(o) for o in offerings[:3])
    assert executor.step(Launch(job_id, 0, candidates, "tok-2", "first launch")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    # Launch times are on the provider's clock, here a manual one: order by token (~index).
    attempts = sorted(store.attempts(job_id), key=lambda a: a.launch_token or "")
    assert [a.end_reason for a in attempts] == [EndReason.LAUNCH_FAILED] * 2 + [None]
    assert [a.error_code for a in attempts[:2]] == ["FakeCapacityUnavailable"] * 2
    assert attempts[2].state is AttemptState.PENDING


def test_parallel_failover_keeps_the_first_that_runs_and_terminates_the_rest(world: Any) -> None:
    store, provider, clock, executor, job_id = world
    offerings = provider.list_offerings()
    provider.fail_next(
        CapacityUnavailable(provider.name, "FakeCapacityUnavailable", "none left"),
        instance_type=offerings[0].instance_type,
        zone=offerings[0].zone,
    )
    candidates = tuple(_candidate(o) for o in offerings[:3])
    assert executor.step(Launch(job_id, 0, candidates, "tok-3", "failover", parallel=True)).ok
    wait_for(lambda: len(provider.requests) == 3, 10, what="three launches at once")
    clock.advance(60)  # past the boot: every survivor runs, the first seen running wins
    wait_for(lambda: not executor.launching(), 10, what="the race to end")
    (outcome,) = executor.outcomes
    assert outcome.winner is not None and len(outcome.superseded) == 1
    assert [f[1] for f in outcome.failures] == ["FakeCapacityUnavailable"]
    by_id = {a.attempt_id: a for a in store.attempts(job_id)}
    assert by_id[outcome.winner].live
    (loser,) = outcome.superseded
    assert by_id[loser].end_reason is EndReason.SUPERSEDED
    assert provider.describe(by_id[loser].instance_id).state is InstanceState.TERMINATED
    assert provider.describe(outcome.instance_id).state is InstanceState.RUNNING
    assert sorted(a.launch_token for a in by_id.values()) == ["tok-3.0", "tok-3.1", "tok-3.2"]


def test_a_failing_step_is_reported_and_the_next_still_runs(world: Any) -> None:
    _, provider, _, executor, _ = world
    reports = executor.execute(
        [
            Terminate("i-unknown", "no-such-cloud", "test"),
            Terminate("i-unknown", provider.name, "idempotent"),
        ]
    )
    assert [r.ok for r in reports] == [False, True]
    assert "KeyError" in (reports[0].error or "")
