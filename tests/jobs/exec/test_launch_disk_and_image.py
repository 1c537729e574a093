"""A job's root volume and machine image reach its launch request: ``resources.disk_size_gib``
and ``disk_tier`` as the request's ``disk``, ``resources.image_id`` (one id, or the attempt's
region's) as its ``image_id``; a job that asks for neither leaves both to the cloud."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller import Launch
from spothop.jobs.controller.executor import Executor
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.base import DiskSpec, DiskTier, LaunchRequest
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.exec.test_executor import _candidate
from tests.waiting import wait_for


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[tuple[JobStore, FakeProvider, Executor]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock())
    ex = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    yield store, provider, ex
    ex.close()
    store.close()


def _request(executor: Any, resources: dict[str, Any]) -> LaunchRequest:
    store, provider, ex = executor
    spec = {"name": "disk", "run": "true", "providers": {"allow": ["fake"]}}
    job_id = store.create_job(load_job({**spec, "resources": resources}))
    offering = provider.list_offerings()[0]
    assert ex.step(Launch(job_id, 0, (_candidate(offering),), "tok-1", "first launch")).ok
    wait_for(lambda: not ex.launching(), 10, what="the launch to end")
    request: LaunchRequest = provider.requests[-1]
    assert request.region == offering.region
    return request


def test_the_disk_and_the_image_reach_the_launch_request(executor: Any) -> None:
    request = _request(
        executor, {"disk_size_gib": 512, "disk_tier": "high", "image_id": "ami-0abc"}
    )
    assert request.disk == DiskSpec(512, DiskTier.HIGH)
    assert request.image_id == "ami-0abc"


def test_a_region_s_image_is_the_one_launched_there(executor: Any) -> None:
    request = _request(executor, {"image_id": {"fake-1": "img-one", "fake-2": "img-two"}})
    assert request.image_id == "img-one" and request.disk is None


def test_a_job_that_asks_for_neither_leaves_both_to_the_cloud(executor: Any) -> None:
    request = _request(executor, {})
    assert request.disk is None and request.image_id is None
