"""Spreading workers over zones and instance types."""

from __future__ import annotations

from spothop.providers.fake.factories import make_offering
from spothop.scheduler.market_view import MarketState, MarketView
from spothop.scheduler.placement import Candidate, rank
from spothop.scheduler.requirements import Requirements
from spothop.scheduler.spread import spread


def _ranked(specs: list[tuple[str, str, float]]) -> list[Candidate]:
    offerings = [
        make_offering(zone=zone, instance_type=itype, spot_price_usd_per_hour=price)
        for zone, itype, price in specs
    ]
    markets = {o.market_id: MarketState(o.market_id, preemption_rate_per_h=0.05) for o in offerings}
    return list(rank(MarketView(0.0, tuple(offerings), markets), Requirements()).candidates)


def _places(chosen: list[Candidate]) -> list[tuple[str, str]]:
    return [(c.market_id.zone, c.market_id.instance_type) for c in chosen]


def test_workers_cover_two_zones_and_two_types_when_the_market_allows() -> None:
    ranked = _ranked([("z1", "t1", 1.0), ("z1", "t2", 1.01), ("z2", "t1", 1.3), ("z2", "t2", 1.5)])
    chosen = spread(ranked, 4, min_zones=2, min_instance_types=2)
    assert len(chosen) == 4
    assert len({z for z, _ in _places(chosen)}) == 2
    assert len({t for _, t in _places(chosen)}) == 2
    # The first pick is the best; the second adds a zone *and* a type at once.
    assert _places(chosen)[:2] == [("z1", "t1"), ("z2", "t2")]
    # The rest alternate over what was chosen, not piled on the cheapest.
    assert _places(chosen)[2:] == [("z1", "t1"), ("z2", "t2")]


def test_one_zone_is_all_there_is_then_one_zone_it_is() -> None:
    ranked = _ranked([("z1", "t1", 1.0), ("z1", "t2", 1.2)])
    chosen = spread(ranked, 3, min_zones=2, min_instance_types=2)
    assert _places(chosen) == [("z1", "t1"), ("z1", "t2"), ("z1", "t1")]


def test_running_workers_count_toward_the_spread() -> None:
    ranked = _ranked([("z1", "t1", 1.0), ("z2", "t1", 1.4)])
    alive = [ranked[0].market_id]
    assert _places(spread(ranked, 1, min_zones=2, alive=alive)) == [("z2", "t1")]


def test_without_minimums_every_worker_goes_to_the_best() -> None:
    ranked = _ranked([("z1", "t1", 1.0), ("z2", "t1", 1.4)])
    assert _places(spread(ranked, 3)) == [("z1", "t1")] * 3
    assert spread([], 3) == [] and spread(ranked, 0) == []


def test_spread_is_deterministic() -> None:
    specs = [(f"z{i % 3}", f"t{i % 4}", 1.0 + i / 100) for i in range(24)]
    assert _places(spread(_ranked(specs), 7, 3, 3)) == _places(spread(_ranked(specs), 7, 3, 3))
