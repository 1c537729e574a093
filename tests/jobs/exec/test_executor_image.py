"""A job's ``image:`` reaches the provider's LaunchRequest through the stored spec."""

from __future__ import annotations

from pathlib import Path

from spothop.jobs.controller import Launch
from spothop.jobs.controller.executor import Executor
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.exec.test_executor import _candidate
from tests.waiting import wait_for

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def test_the_launch_request_carries_the_jobs_image(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock())
    executor = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    try:
        with_image = store.create_job(load_job({"name": "i", "run": "true", "image": IMAGE}))
        without = store.create_job(load_job({"name": "n", "run": "true"}))
        offering = provider.list_offerings()[0]
        for job_id, token in ((with_image, "tok-i"), (without, "tok-n")):
            assert executor.step(Launch(job_id, 0, (_candidate(offering),), token, "first")).ok
            wait_for(lambda: not executor.launching(), 10, what="the launch to end")
        assert [r.image for r in provider.requests] == [IMAGE, None]
    finally:
        executor.close()
        store.close()
