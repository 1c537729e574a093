"""What feeds the market view: boot times from the providers, λ from the store's history, the cache."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.jobs.controller.observe import Observer
from spothop.jobs.store import JobStore
from spothop.market.clock import ManualClock
from spothop.market.interruptions import HistoryBook, Interruption, InterruptionStore
from spothop.market.reliability import MarketEvidence, ReliabilityBook
from spothop.providers.fake.factories import make_market, make_offering, make_offerings
from spothop.providers.fake.provider import FakeProvider
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from spothop.scheduler.market_view import (
    DEFAULT_BOOT_S,
    MarketKind,
    MarketView,
    ViewCache,
    gather_market_view,
)
from spothop.scheduler.placement import rank
from spothop.scheduler.requirements import Requirements

NOW = 1_780_000_000.0  # a real unix time: interruption records refuse times outside 2006 … 2100


class _Broken(FakeProvider):
    def list_offerings(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("the cloud is down")


def test_boot_times_come_from_the_providers_capabilities() -> None:
    fake = FakeProvider(launch_delay_s=7.0)
    view = gather_market_view([fake])
    assert view.boot_s_of("fake") == 7.0
    assert gather_market_view([fake], boot_s={"fake": 30.0}).boot_s_of("fake") == 30.0
    assert view.boot_s_of("elsewhere") == DEFAULT_BOOT_S
    (best, *_) = rank(view, Requirements()).candidates
    assert best.factors["boot_s"] == 7.0


def test_the_local_cloud_boots_in_its_worlds_launch_delay() -> None:
    world = load_world()
    for cloud in world.spec.clouds:
        provider = LocalProvider(cloud.name, world=world)
        assert provider.capabilities.typical_boot_s == cloud.launch_delay_s


def test_a_provider_that_cannot_list_is_left_out_and_reported() -> None:
    seen: list[str] = []
    good = FakeProvider(name="fake")
    broken = _Broken(name="other", markets=[make_market(make_offering(provider="other"))])
    view = gather_market_view([good, broken], on_error=lambda p, exc: seen.append(p.name))
    assert seen == ["other"] and {o.provider for o in view.offerings} == {"fake"}


def test_the_cache_keeps_the_offerings_columns_and_writes_only_the_live_state() -> None:
    clock = ManualClock(NOW)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=clock)
    cache = ViewCache()
    first = gather_market_view([provider], cache=cache)
    clock.advance(1.0)
    provider.markets[0].set_price(1.01, at_s=clock.now())
    second = gather_market_view([provider], cache=cache)
    assert cache.builds == 1
    market = provider.markets[0].offering.market_id
    assert second.state_of(market).spot_price_usd_per_hour == 1.01
    assert first.state_of(market).spot_price_usd_per_hour != 1.01
    assert rank(second, Requirements()).candidates[0].market_id == market
    provider.markets.pop()
    gather_market_view([provider], cache=cache)
    assert cache.builds == 2  # other offerings: the columns are built again


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_a_gathered_view_ranks_like_one_built_from_plain_market_states(seed: int) -> None:
    rng = random.Random(seed)
    offerings = make_offerings(zones=("fake-1a", "fake-1b", "fake-1c"))
    markets = [
        make_market(
            o,
            spot_price_usd_per_hour=rng.uniform(0.5, 3.0),
            available=rng.random() > 0.2,
        )
        for o in offerings
    ]
    evidence = [
        MarketEvidence(
            o.market_id, o.gpu, instance_hours=rng.uniform(1, 50), preemptions=rng.randint(0, 20)
        )
        for o in rng.sample(offerings, k=len(offerings) // 2)
    ]
    book = ReliabilityBook.from_evidence(evidence)
    gathered = gather_market_view([FakeProvider(markets=markets)], book, cache=ViewCache())
    plain = MarketView(
        gathered.now,
        gathered.offerings,
        {m: gathered.markets[m] for m in gathered.markets},
        dict(gathered.boot_s),
    )
    for column in ("spot_price_usd_per_hour", "spot_available", "preemption_rate_per_h"):
        assert np.array_equal(
            getattr(gathered.table, column), getattr(plain.table, column), equal_nan=True
        )
    kinds = (MarketKind.SPOT, MarketKind.ON_DEMAND)
    ids = [
        (c.market_id, c.market_kind) for c in rank(gathered, Requirements(), kinds=kinds).candidates
    ]
    assert ids == [
        (c.market_id, c.market_kind) for c in rank(plain, Requirements(), kinds=kinds).candidates
    ]


def test_the_controller_ranks_a_market_it_saw_preempted_below_a_calm_one(tmp_path: Path) -> None:
    stormy = make_offering(zone="fake-1a")
    calm = make_offering(zone="fake-1b")
    clock = ManualClock(NOW)
    provider = FakeProvider(
        markets=[
            make_market(stormy, spot_price_usd_per_hour=1.00),
            make_market(calm, spot_price_usd_per_hour=1.02),
        ],
        clock=clock,
    )
    store = JobStore(f"sqlite:///{tmp_path / 'spothop.db'}")
    observer = Observer(store, {"fake": provider}, market_ttl_s=0.0)
    before = rank(observer.market(), Requirements(), kinds=(MarketKind.SPOT,)).candidates
    assert before[0].market_id == stormy.market_id  # the cheaper one, while nothing is known

    history = InterruptionStore(engine=store.engine)
    for k in range(3):
        history.record_interruption(
            Interruption(stormy.market_id, "termination", 120.0, NOW - 3600.0 * (k + 1))
        )
    clock.advance(5.0)
    view = observer.market()
    after = rank(view, Requirements(), kinds=(MarketKind.SPOT,)).candidates
    assert after[0].market_id == calm.market_id
    assert view.state_of(stormy.market_id).preemption_rate_per_h > (
        view.state_of(calm.market_id).preemption_rate_per_h
    )
    store.close()


def test_the_history_book_is_built_again_only_when_the_history_moves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'spothop.db'}"
    market = make_offering().market_id
    feed = HistoryBook(url, refresh_s=600.0, gpu_of=lambda m: "H100")
    first = feed(NOW)
    assert feed(NOW + 5.0) is first and feed.builds == 1
    InterruptionStore(url).record_interruption(Interruption(market, "termination", 120.0, NOW))
    moved = feed(NOW + 10.0)
    assert feed.builds == 2 and moved.get(market) is not None
    assert feed(NOW + 700.0) is not moved  # the window slid: built again
