"""A launch error that repeats on every launch of a provider (configuration, credentials) ends
its attempt ``launch_refused`` with the error's whole text, and the controller fails the job with
it after at most 2 launch calls, instead of failing over to every market of that provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import AuthFailed, ConfigError
from spothop.jobs.controller import Launch
from spothop.jobs.controller.loop import Controller
from spothop.jobs.lifecycle import EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.base import Instance, LaunchRequest
from spothop.scheduler.market_view import MarketKind
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.exec.test_executor import _candidate
from tests.waiting import wait_for

NO_IMAGE = "fake: no image to launch in fake-1: set SPOTHOP_FAKE_IMAGE_ID to an image with drivers"


class Counting(FakeProvider):
    """A fake provider that counts its launch calls, failed ones included."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.launch_calls = 0

    def launch(self, request: LaunchRequest) -> Instance:
        self.launch_calls += 1
        return super().launch(request)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[JobStore, Counting, Controller]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    offerings = make_offerings()
    provider = Counting(markets=[make_market(o) for o in offerings], clock=ManualClock())
    controller = Controller(store, {provider.name: provider}, store_url=url, home=tmp_path)
    yield store, provider, controller
    controller.close()
    store.close()


def _failed(controller: Controller, store: JobStore, job_id: str) -> bool:
    controller.run_pass()
    return store.get_job(job_id).state is JobState.FAILED


@pytest.mark.parametrize(
    "error",
    [
        ConfigError(NO_IMAGE),
        AuthFailed("fake", "ExpiredToken", "the security token included in the request expired"),
    ],
    ids=["config", "auth"],
)
def test_a_refused_launch_fails_the_job_with_its_message_after_at_most_two_calls(
    world: tuple[JobStore, Counting, Controller], error: Exception
) -> None:
    store, provider, controller = world
    provider.fail_next(error, times=50)  # every launch would fail so
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    wait_for(lambda: _failed(controller, store, job_id), 30, what="the job to fail")
    assert provider.launch_calls <= 2
    job = store.get_job(job_id)
    assert str(error) in job.reason and "submit the job again" in job.reason
    attempts = store.attempts(job_id)
    assert attempts and all(a.end_reason is EndReason.LAUNCH_REFUSED for a in attempts)
    assert str(error) in (attempts[0].error_message or "")
    events = [e for e in store.events(job_id) if str(error) in str(e.data)]
    assert events, "the message is in the job's events"


def test_an_in_order_launch_asks_a_refusing_provider_once(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    provider.fail_next(AuthFailed("fake", "ExpiredToken", "token expired"), times=5)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    candidates = tuple(_candidate(o) for o in provider.list_offerings()[:3])
    executor = controller.executor
    assert executor.step(Launch(job_id, 0, candidates, "tok-1", "first launch")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    assert provider.launch_calls == 1
    (attempt,) = store.attempts(job_id)
    assert attempt.end_reason is EndReason.LAUNCH_REFUSED and attempt.error_code == "ExpiredToken"
    assert attempt.error_message == "fake: ExpiredToken: token expired"


def test_a_parallel_launch_asks_a_refusing_provider_once(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    provider.fail_next(ConfigError(NO_IMAGE), times=5)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    candidates = tuple(_candidate(o) for o in provider.list_offerings()[:3])
    executor = controller.executor
    assert executor.step(Launch(job_id, 0, candidates, "tok-3", "failover", parallel=True)).ok
    wait_for(lambda: not executor.launching(), 10, what="the race to end")
    assert provider.launch_calls == 1  # the others waited for it, and were not asked
    attempts = store.attempts(job_id)
    assert len(attempts) == 3
    assert all(a.end_reason is EndReason.LAUNCH_REFUSED for a in attempts)
    assert {a.error_message for a in attempts} == {NO_IMAGE}


def test_a_reserved_pools_invalid_request_stays_that_pools_failure(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    # The pool is one the provider does not hold: its request is refused as invalid (before
    # any cloud call), and that is the pool's failure, not the provider's.
    store, provider, controller = world
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    pool = _candidate(provider.list_offerings()[0], MarketKind.RESERVED)
    executor = controller.executor
    assert executor.step(Launch(job_id, 0, (pool,), "tok-2", "reserved capacity first")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    (attempt,) = store.attempts(job_id)
    assert attempt.end_reason is EndReason.LAUNCH_FAILED
    assert attempt.error_code == provider.codes.invalid_parameter
