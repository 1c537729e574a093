"""The budget rule counts dollars as the provider bills them, whatever its clock's speed.

A simulated cloud at ``speed`` 10 bills ten of its seconds for each of the controller's: a spend
estimate on the controller's clock saw a tenth of the bill, and a job ran on to ten times its
budget. The fake provider here runs on such a clock (a :class:`SimClock` over a virtual wall),
and the controller's real observe → decide → act pass runs over it.
"""

from __future__ import annotations

from pathlib import Path

from spothop.jobs.controller import decide
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.observe import Observer
from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.market.clock import SimClock
from spothop.testing import FakeProvider, make_market, make_offering
from tests.waiting import wait_for

SPEED = 10.0
PRICE_USD_PER_H = 3.6  # both markets: whichever the job runs in bills $0.001 a second
BUDGET_USD = 1.0


def _pass(observer: Observer, executor: Executor) -> None:
    assert all(r.ok for r in executor.execute(decide(observer.snapshot())))
    wait_for(lambda: not executor.launching(), 10, what="the pass's launches to end")
    observer.commit()


def test_a_budget_is_enforced_in_billed_dollars_on_a_cloud_ten_times_faster(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    wall = ManualClock(1_000_000.0)  # the controller's clock
    offering = make_offering(
        spot_price_usd_per_hour=PRICE_USD_PER_H, on_demand_price_usd_per_hour=PRICE_USD_PER_H
    )
    clock = SimClock(SPEED, 2_000_000.0, wall.now(), wall=wall.now, wall_sleep=wall.sleep)
    provider = FakeProvider(markets=[make_market(offering)], clock=clock)
    executor = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    observer = Observer(store, {provider.name: provider}, market_ttl_s=0.0, clock=wall.now)
    try:
        spec = {"name": "b", "run": "sleep 1e6", "budget_usd": BUDGET_USD}
        job_id = store.create_job(load_job(spec))
        _pass(observer, executor)
        [attempt] = store.attempts(job_id)
        assert attempt.instance_id is not None
        price = attempt.price_usd_per_hour
        assert price == PRICE_USD_PER_H
        # 30 controller seconds, 300 billed: under the budget, the job runs on.
        wall.advance(30)
        _pass(observer, executor)
        assert store.get_job(job_id).state is JobState.RUNNING
        # 150 controller seconds in all, 1,500 billed: past it (the controller's own 150 s
        # at this price are a tenth of the budget: the estimate on its clock ran on).
        wall.advance(120)
        _pass(observer, executor)
        job = store.get_job(job_id)
        assert job.state is JobState.FAILED, job.reason
        spent = price * 150 * SPEED / 3600
        assert job.reason.startswith(f"budget_usd reached: ${spent:.4f} spent of $1"), job.reason
        assert not provider.describe(attempt.instance_id).state.is_alive  # its instance stopped
    finally:
        observer.commit()
        executor.close()
        store.close()
