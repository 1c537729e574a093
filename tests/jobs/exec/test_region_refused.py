"""A launch error that holds in one region only (a region the account has not enabled, an image
that exists in another region) stops the job trying that provider in that region, not the whole
provider: its other regions still take the job. An error that holds everywhere still stops it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.errors import AuthFailed, InvalidRequest, ProviderError
from spothop.jobs.controller import Launch
from spothop.jobs.controller.loop import Controller
from spothop.jobs.lifecycle import EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.aliyun.errors import TABLE as ECS_CODES
from spothop.providers.gcp.errors import TABLE as COMPUTE_CODES
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.exec.test_executor import _candidate
from tests.jobs.exec.test_executor_refused import Counting
from tests.waiting import wait_for

CLOSED = ("fake-1a", "fake-1b")  # the zones of the region the account has not enabled
OPEN = ("fake-2a", "fake-2b")


def _not_enabled() -> ProviderError:
    error = AuthFailed(
        "fake", "OptInRequired", "You are not subscribed to this service in region fake-1."
    )
    error.region_scoped = True
    return error


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[JobStore, Counting, Controller]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    offerings = make_offerings(region="fake-1", zones=CLOSED) + make_offerings(
        region="fake-2", zones=OPEN
    )
    provider = Counting(markets=[make_market(o) for o in offerings], clock=ManualClock())
    controller = Controller(store, {provider.name: provider}, store_url=url, home=tmp_path)
    yield store, provider, controller
    controller.close()
    store.close()


def _script(provider: FakeProvider, error: ProviderError, zones: tuple[str, ...]) -> None:
    for zone in zones:
        provider.fail_next(error, times=50, zone=zone)


def _launched(controller: Controller, store: JobStore, job_id: str) -> bool:
    controller.run_pass()
    return any(a.instance_id for a in store.attempts(job_id))


def test_a_region_not_enabled_stops_that_region_only(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    _script(provider, _not_enabled(), CLOSED)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    wait_for(lambda: _launched(controller, store, job_id), 30, what="a launch in the open region")
    attempts = store.attempts(job_id)
    refused = [a for a in attempts if a.end_reason is not None]
    running = [a for a in attempts if a.instance_id]
    assert running and all(a.region == "fake-2" for a in running)
    assert store.get_job(job_id).state is not JobState.FAILED
    assert refused and all(a.end_reason is EndReason.REGION_REFUSED for a in refused)
    assert all(a.region == "fake-1" for a in refused)
    assert "OptInRequired" in (refused[0].error_message or "")
    # The closed region was asked at most twice (one call per launch, as a provider-wide refusal).
    assert sum(1 for a in attempts if a.region == "fake-1") <= 2


def test_an_in_order_launch_skips_the_refusing_region_and_tries_the_next(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    _script(provider, _not_enabled(), CLOSED)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    by_zone = {o.zone: o for o in provider.list_offerings()}
    candidates = tuple(_candidate(by_zone[z]) for z in ("fake-1a", "fake-1b", "fake-2a"))
    executor = controller.executor
    assert executor.step(Launch(job_id, 0, candidates, "tok-1", "first launch")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    assert provider.launch_calls == 2  # fake-1a refused for its region; fake-1b not asked
    ends = {a.zone: a.end_reason for a in store.attempts(job_id)}
    assert ends == {"fake-1a": EndReason.REGION_REFUSED, "fake-2a": None}


def test_a_parallel_launch_ends_the_refusing_regions_others_unasked(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    _script(provider, _not_enabled(), CLOSED)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    by_zone = {o.zone: o for o in provider.list_offerings()}
    candidates = tuple(_candidate(by_zone[z]) for z in ("fake-1a", "fake-1b", "fake-2a"))
    executor = controller.executor
    assert executor.step(Launch(job_id, 0, candidates, "tok-p", "failover", parallel=True)).ok
    wait_for(lambda: provider.launch_calls == 2, 10, what="the open region's launch")
    provider.clock.advance(60.0)  # past its boot: the racer sees it running and wins
    wait_for(lambda: not executor.launching(), 10, what="the race to end")
    assert provider.launch_calls == 2  # fake-1a (refused for its region) and fake-2a
    ends = {a.zone: a.end_reason for a in store.attempts(job_id)}
    assert ends["fake-1a"] is ends["fake-1b"] is EndReason.REGION_REFUSED
    assert ends["fake-2a"] is None  # it runs


def test_a_region_scoped_error_in_every_region_fails_the_job_naming_each(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    _script(provider, _not_enabled(), CLOSED + OPEN)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))

    def failed() -> bool:
        controller.run_pass()
        return store.get_job(job_id).state is JobState.FAILED

    wait_for(failed, 30, what="the job to fail")
    reason = store.get_job(job_id).reason
    assert "fake in fake-1 refused" in reason and "fake in fake-2 refused" in reason
    assert provider.launch_calls <= 4


def test_a_provider_wide_error_still_stops_every_region(
    world: tuple[JobStore, Counting, Controller],
) -> None:
    store, provider, controller = world
    error = InvalidRequest("fake", "InvalidParameter", "the user data is too long")
    _script(provider, error, CLOSED + OPEN)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))

    def failed() -> bool:
        controller.run_pass()
        return store.get_job(job_id).state is JobState.FAILED

    wait_for(failed, 30, what="the job to fail")
    assert provider.launch_calls <= 2
    assert all(a.end_reason is EndReason.LAUNCH_REFUSED for a in store.attempts(job_id))


@pytest.mark.parametrize(
    ("table", "regional", "everywhere"),
    [
        (ECS_CODES, "InvalidImageId.NotFound", "Forbidden.RAM"),
        (ECS_CODES, "InvalidRegionId.NotFound", "InvalidAccessKeyId.NotFound"),
        (COMPUTE_CODES, "conditionNotMet", "forbidden"),
    ],
)
def test_the_clouds_code_tables_mark_the_region_scoped_errors(
    table: object, regional: str, everywhere: str
) -> None:
    assert table.map_error("x", regional, "m").region_scoped is True  # type: ignore[attr-defined]
    assert table.map_error("x", everywhere, "m").region_scoped is False  # type: ignore[attr-defined]
