"""Closing the books as attempts end: the ledger record, and the run hours behind λ."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.store import JobStore
from spothop.market.interruptions import HistoryBook, Interruption, InterruptionStore
from spothop.market.reliability import DEFAULT_PRIOR_RATE_PER_H
from spothop.observe.ledger import Ledger, close_ended
from spothop.observe.rates import price_over
from spothop.resources.market_id import MarketId

START = 1_800_000_000.0
HOUR_S = 3600.0
MARKET = MarketId("local", "r1", "r1-a", "gpu.small")


@dataclass(frozen=True)
class Spec:
    name: str = "calm"
    kind: str = "task"
    num_nodes: int = 1
    workers: int = 1

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "kind": self.kind, "num_nodes": 1, "workers": 1})


@pytest.fixture
def store(tmp_path: Path) -> JobStore:
    return JobStore(f"sqlite:///{tmp_path / 'spothop.db'}")


def _ran(
    store: JobStore, job_id: str, start: float, hours: float, market_kind: str = "spot"
) -> str:
    """An attempt in MARKET that ran ``hours`` from ``start`` and ended (no instance: the store's clock)."""
    attempt = store.add_attempt(
        job_id,
        0,
        provider=MARKET.provider,
        region=MARKET.region,
        zone=MARKET.zone,
        instance_type=MARKET.instance_type,
        market_kind=market_kind,
        price_usd_per_hour=0.5,
    )
    store.update_attempt(attempt.attempt_id, state=AttemptState.RUNNING, running_unix_s=start)
    store.update_attempt(
        attempt.attempt_id,
        state=AttemptState.ENDED,
        end_reason=EndReason.SUCCEEDED,
        ended_unix_s=start + hours * HOUR_S,
    )
    return attempt.attempt_id


def _rate(store: JobStore, now: float) -> float:
    return HistoryBook(engine=store.engine, gpu_of=lambda m: "T4")(now).preemption_rate_per_h(
        MARKET, "T4"
    )


def test_a_market_that_ran_many_hours_calmly_gets_a_lower_rate_than_the_prior(
    store: JobStore, tmp_path: Path
):
    job_id = store.create_job(Spec())  # type: ignore[arg-type]
    now = START + 11 * 20 * HOUR_S
    assert _rate(store, now) == pytest.approx(DEFAULT_PRIOR_RATE_PER_H)  # no history: the prior
    for i in range(10):  # 10 runs of 20 h, one preemption in all: 1 per 200 h
        _ran(store, job_id, START + i * 20 * HOUR_S, 20.0)
    InterruptionStore(engine=store.engine).record_interruption(
        Interruption(MARKET, "final", 30.0, START + 5 * HOUR_S)
    )
    closed = close_ended(store, {})
    assert len(closed) == 10 and all(r.closed and r.usage_s == 20 * HOUR_S for r in closed)
    rate = _rate(store, now)
    assert rate < DEFAULT_PRIOR_RATE_PER_H / 2, rate
    # The same preemption over no hours at all (no runs recorded) reads no better than the prior.
    bare = JobStore(f"sqlite:///{tmp_path / 'bare.db'}")
    InterruptionStore(engine=bare.engine).record_interruption(
        Interruption(MARKET, "final", 30.0, START + 5 * HOUR_S)
    )
    assert _rate(bare, now) >= DEFAULT_PRIOR_RATE_PER_H


def test_each_run_is_recorded_once_and_on_demand_hours_do_not_count(store: JobStore):
    job_id = store.create_job(Spec())  # type: ignore[arg-type]
    spot = _ran(store, job_id, START, 3.0)
    _ran(store, job_id, START + 4 * HOUR_S, 5.0, market_kind="on-demand")
    assert len(close_ended(store, {})) == 2
    assert close_ended(store, {}) == []  # nothing pending: the records are closed
    Ledger(store, {}).close(spot)  # a second close of the same attempt records nothing more
    Ledger(store, {}).update(job_id)  # nor does the report's catch-up
    evidence = InterruptionStore(engine=store.engine).evidence(
        START + 10 * HOUR_S, lambda m: "T4", window_s=30 * HOUR_S
    )
    assert [(e.market, e.instance_hours) for e in evidence] == [(MARKET, pytest.approx(3.0))]


def test_a_failing_close_is_logged_and_the_report_catches_up(
    store: JobStore, caplog: pytest.LogCaptureFixture
):
    job_id = store.create_job(Spec())  # type: ignore[arg-type]
    attempt_id = _ran(store, job_id, START, 2.0)

    class Broken:
        @property
        def capabilities(self):
            raise RuntimeError("the provider is down")

    assert close_ended(store, {MARKET.provider: Broken()}) == []  # type: ignore[dict-item]
    assert "not written" in caplog.text
    assert Ledger(store, {}).records(job_id) == []
    records = Ledger(store, {}).update(job_id)
    assert [(r.attempt_id, r.closed, r.cost_microusd) for r in records] == [
        (attempt_id, True, 1_000_000)
    ]


def test_the_price_over_a_run_is_the_time_weighted_mean_of_the_steps_in_force():
    # Placed at 1.0; observed 2.0 from t=10 (before the run), 4.0 from t=150, 8.0 after the end.
    points = [(10.0, 2.0), (150.0, 4.0), (300.0, 8.0)]
    assert price_over(points, 1.0, 100.0, 200.0) == pytest.approx((2.0 * 50 + 4.0 * 50) / 100)
    assert price_over([(150.0, 4.0)], 1.0, 100.0, 200.0) == pytest.approx(2.5)
    assert price_over([], 1.0, 100.0, 200.0) is None  # nothing seen: the placement price stands
    assert price_over([(120.0, 1.0)], 1.0, 100.0, 200.0) is None  # seen, but the same price
    assert price_over([(50.0, 3.0)], 1.0, 100.0, 200.0) == 3.0  # one price in force, exactly
