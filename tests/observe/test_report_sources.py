"""Where a report's figures come from, through the controller's real executor on a virtual clock:
the bill a provider keeps (or none: estimated, not reconciled), and goodput from the work the
agents reported, not from an instance's running time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller import Launch
from spothop.jobs.controller.executor import Executor
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.observe.job_report import job_report
from spothop.observe.reconcile import NOT_RECONCILED
from spothop.providers.fake.provider import FAKE_BILL_SOURCE
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.state.agent_tables import agent_heartbeats
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.waiting import wait_for

HOUR_S = 3600.0


@pytest.fixture
def world(tmp_path: Path) -> Any:
    """A fake cloud that keeps its own records (a bill) and one that has no bill API (its
    figure is an estimate, as a real cloud's adapter's is), on one virtual clock."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    clock = ManualClock(1_000_000.0)
    billed = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=clock)
    estimated = FakeProvider(
        name="nobill",
        markets=[make_market(o) for o in make_offerings(provider="nobill")],
        clock=clock,
    )
    estimated.capabilities = replace(estimated.capabilities, bill_source=None)
    providers = {billed.name: billed, estimated.name: estimated}
    executor = Executor(store, providers, store_url=url, home=tmp_path)
    yield store, providers, executor, clock
    executor.close()
    store.close()


def _run_an_hour(world: Any, provider: str, name: str) -> tuple[str, str]:
    """A job launched on ``provider``, its instance running for an hour: (job id, instance id)."""
    store, providers, executor, clock = world
    job_id = store.create_job(load_job({"name": name, "run": "python train.py"}))
    offering = providers[provider].list_offerings()[0]
    price = offering.spot_price_usd_per_hour or 0.0
    candidate = Candidate(offering, MarketKind.SPOT, price, 0.05, 100.0, 0.9, 0.0, 0.01)
    token = f"tok-{name}"
    assert executor.step(Launch(job_id, 0, (candidate,), token, "launch")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    attempt = store.attempt_by_token(token)
    clock.advance(HOUR_S)
    return job_id, attempt.instance_id


def test_an_instance_whose_agent_reported_nothing_has_no_goodput(world: Any) -> None:
    store, providers, *_ = world
    job_id, _ = _run_an_hour(world, "fake", "silent")
    data = job_report(store, job_id, providers).to_dict()
    assert data["paid_gpu_s"] > 0 and data["goodput"] == 0.0
    assert data["unreported_gpu_s"] == data["paid_gpu_s"]
    assert len(data["unreported_attempts"]) == 1
    assert data["on_demand_cost_microusd"] == 0  # no useful work to price at on-demand


def test_the_work_an_agent_reported_is_what_goodput_counts(world: Any) -> None:
    store, providers, *_ = world
    job_id, instance_id = _run_an_hour(world, "fake", "stepping")
    with store.engine.begin() as conn:
        row = {"instance_id": instance_id, "time_unix_s": 1.0, "state": "running"}
        conn.execute(agent_heartbeats.insert(), [{**row, "worker_step": 420}])
    data = job_report(store, job_id, providers).to_dict()
    assert data["goodput"] == 1.0 and data["unreported_attempts"] == []


def test_a_provider_with_a_bill_is_reconciled_against_it_by_name(world: Any) -> None:
    store, providers, *_ = world
    job_id, _ = _run_an_hour(world, "fake", "billed")
    data = job_report(store, job_id, providers).to_dict()["reconciliation"]
    (row,) = data["by_provider"]
    assert row["reconciled"] and row["source"] == FAKE_BILL_SOURCE
    assert row["provider_microusd"] > 0
    assert row["summary"] == f"reconciled against {FAKE_BILL_SOURCE}: Δ 0 µUSD"


def test_a_provider_without_a_bill_is_estimated_not_reconciled(world: Any) -> None:
    store, providers, *_ = world
    job_id, _ = _run_an_hour(world, "nobill", "estimated")
    data = job_report(store, job_id, providers).to_dict()
    (row,) = data["reconciliation"]["by_provider"]
    assert row["summary"] == NOT_RECONCILED and row["difference_microusd"] is None
    # Its own figure agrees with the ledger (both from one price): that is no reconciliation.
    assert data["reconciliation"]["ledger_microusd"] == 0
    assert data["cost_microusd"] > 0
