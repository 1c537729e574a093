"""A provider whose credentials expire mid-job: the job says so, nothing is ended or launched
blind, and the reason clears once the provider answers again (jobs/controller/unread.py).

Observe → decide → act on a virtual clock, the fake provider's listing raising what EC2 raises
for an expired session token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spothop.errors import AuthFailed
from spothop.jobs.controller import Launch, decide
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.observe import Observer
from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.waiting import wait_for

EXPIRED = "The security token included in the request is expired"


class Expiring(FakeProvider):
    """A fake provider whose listing fails as an expired session token does, while ``expired``."""

    expired = False

    def list_instances(self) -> list[Any]:
        if self.expired:
            raise AuthFailed(self.name, "ExpiredToken", EXPIRED)
        return super().list_instances()


@pytest.fixture
def world(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    clock = ManualClock(1_000_000.0)
    provider = Expiring(markets=[make_market(o) for o in make_offerings()], clock=clock)
    executor = Executor(store, {"fake": provider}, store_url=url, home=tmp_path)
    observer = Observer(store, {"fake": provider}, market_ttl_s=0.0, clock=clock.now)
    yield store, provider, executor, observer, clock
    observer.commit()
    executor.close()
    store.close()


def _pass(executor: Executor, observer: Observer) -> list[Any]:
    actions = decide(observer.snapshot())
    assert all(r.ok for r in executor.execute(actions))
    observer.commit()
    return actions


def test_expired_credentials_mid_job_name_the_provider_the_error_and_the_fix(world: Any) -> None:
    store, provider, executor, observer, clock = world
    job_id = store.create_job(load_job({"name": "t", "run": "sleep 3600"}))
    offering = provider.list_offerings()[0]
    candidate = Candidate(offering, MarketKind.SPOT, 1.0, 0.05, 100.0, 0.9, 0.0, 0.01)
    assert executor.step(Launch(job_id, 0, (candidate,), "tok-1", "launch")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    instance_id = store.attempt_by_token("tok-1").instance_id
    _pass(executor, observer)

    provider.expired = True
    for _ in range(3):  # pass after pass: one reason, nothing ended, nothing launched blind
        clock.advance(30.0)
        actions = _pass(executor, observer)
        assert not [a for a in actions if isinstance(a, Launch)]
    job = store.get_job(job_id)
    assert job.state is not JobState.FAILED
    assert job.reason.startswith("fake cannot be read (AuthFailed")
    assert EXPIRED in job.reason and instance_id in job.reason
    assert "renew or fix its credentials" in job.reason
    assert store.attempt_by_token("tok-1").live
    said = [e for e in store.events(job_id) if e.kind == "waiting"]
    assert len([e for e in said if "cannot be read" in str(e.data)]) == 1  # said once

    provider.expired = False
    clock.advance(30.0)
    _pass(executor, observer)
    assert store.get_job(job_id).reason == "fake can be read again"
    assert store.attempt_by_token("tok-1").live
