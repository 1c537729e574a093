"""Spot prices that move during a run: the ledger prices it from the cloud's own price history,
to the micro-dollar; a cloud without one is priced with the prices the controller saw."""

from __future__ import annotations

from typing import Any

from spothop.market.price_store import PriceStore
from spothop.observe.billing import microusd
from spothop.observe.ledger import Ledger
from spothop.observe.rates import RATE_CLOUD, RATE_OBSERVED, SOURCE_OBSERVED
from spothop.providers.base import Instance
from spothop.providers.local.runtime import spot_market
from spothop.resources.market_id import MarketId
from tests.jobs.e2e.conftest import Harness
from tests.waiting import scaled, wait_for

PRICE_STEP_S = 300.0  # the synthetic market's price tick (simulated seconds)
SAMPLE_S = 5.0  # the test reads the cloud's price path this finely (well under a step)


class NoHistory:
    """A cloud that bills the same but keeps no price history the ledger can ask."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.capabilities = inner, inner.name, inner.capabilities

    def describe(self, instance_id: str) -> Instance:
        return self.inner.describe(instance_id)


def test_a_run_across_price_steps_is_priced_as_the_cloud_billed_it(moving_harness: Harness):
    h = moving_harness
    spec = {
        "name": "ledger-moving",
        "resources": {"gpu": "T4", "gpus_per_node": 1},
        "market": "spot",
        "providers": {"allow": ["aws-sim"]},
        "run": "sleep 12",  # wall seconds: 600 simulated, two price steps
    }
    job_id = h.launch(spec)
    h.wait_state(job_id, {"succeeded"}, scaled(90), what="the job to succeed")
    ours = lambda: [i for i in h.instances() if i.tags.get("spothop-job") == job_id]  # noqa: E731
    wait_for(
        lambda: ours() and all(not i.state.is_alive for i in ours()),
        scaled(30),
        what="every instance ended",
    )

    def closed() -> list | None:
        with h.store() as store:
            records = Ledger(store).records(job_id)
            n = len(store.attempts(job_id))
        return records if len(records) == n and all(r.closed for r in records) else None

    # The controller closed the books (its hook, with the providers): the cloud's history.
    records = wait_for(closed, scaled(30), what="the controller to close the records")
    ran = [r for r in records if r.usage_s > 0]
    assert len(ran) == 1, records
    record = ran[0]
    assert record.usage_s > PRICE_STEP_S  # the run crossed a step
    assert record.rate_source == RATE_CLOUD, record
    assert record.cost_microusd == record.provider_cost_microusd, record
    provider = h.providers[record.provider]
    rows = provider.store.billing_rows(record.instance_id)
    assert len({r["price_usd_per_hour"] for r in rows}) >= 2  # billed at moving prices
    assert sum(r["cost_micro_usd"] for r in rows) == record.cost_microusd
    with h.store() as store:
        attempt = store.attempt(record.attempt_id)
        # The same attempt on a cloud without a price history: the observed prices, bounded.
        blind = Ledger(store, {n: NoHistory(p) for n, p in h.providers.items()})
        seen = blind.price(attempt)
        observed = [
            p
            for p in PriceStore(engine=store.engine).points()
            if p.source == SOURCE_OBSERVED and p.series.market.instance_type == record.instance_type
        ]
    assert record.price_usd_per_hour != attempt.price_usd_per_hour  # not the placement price
    assert seen.rate_source == RATE_OBSERVED, seen
    assert len({p.price_usd_per_hour for p in observed}) >= 2  # the controller saw it move

    # The bound without a history: both books are time-weighted means of the same price path
    # over the run (the ledger's from quotes seen at most a pass late), so they differ by at
    # most the path's range over launch … end, times the billed hours (plus a µ$ a row).
    market = MarketId.of(record.provider, record.region, record.zone, record.instance_type)
    path = spot_market(provider.store, provider.world, [market])
    assert record.usage_end_unix_s is not None
    t, samples = attempt.launched_unix_s, []
    while t <= record.usage_end_unix_s:
        samples.append(path.price_usd_per_hour(market, t))
        t += SAMPLE_S
    spread = max(samples) - min(samples)
    assert spread > 0
    difference = (record.provider_cost_microusd or 0) - (seen.cost_microusd or 0)
    assert abs(difference) <= microusd(spread, record.billed_s) + len(rows) + 1, (difference, seen)
    placed = microusd(attempt.price_usd_per_hour, record.billed_s)
    print(
        f"cloud = ledger {record.cost_microusd} µ$; from observed prices {seen.cost_microusd} µ$; "
        f"placement price alone {placed} µ$"
    )
