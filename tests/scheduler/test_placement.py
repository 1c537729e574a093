"""Ranking by the expected cost of useful work."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spothop.errors import EXIT_BAD_INPUT, EXIT_UNAVAILABLE
from spothop.market.reliability import MarketEvidence, ReliabilityBook
from spothop.providers.fake.factories import make_market, make_offering, make_offerings
from spothop.providers.fake.provider import FakeProvider
from spothop.resources.market_id import MarketId
from spothop.scheduler.egress import egress_table
from spothop.scheduler.errors import NoCandidates, NoCapacityNow
from spothop.scheduler.market_view import MarketKind, MarketState, MarketView, gather_market_view
from spothop.scheduler.placement import CandidateList, ReservedPool, WorkProfile, rank
from spothop.scheduler.requirements import Requirements


def _view(offerings, rates=None, **kwargs) -> MarketView:  # type: ignore[no-untyped-def]
    markets = {
        o.market_id: MarketState(o.market_id, preemption_rate_per_h=rate)
        for o, rate in zip(offerings, rates or [], strict=False)
    }
    return MarketView(now=0.0, offerings=tuple(offerings), markets=markets, **kwargs)


def test_a_cheap_stormy_market_loses_to_a_slightly_dearer_calm_one() -> None:
    stormy = make_offering(zone="fake-1a", spot_price_usd_per_hour=1.00)
    calm = make_offering(zone="fake-1b", spot_price_usd_per_hour=1.15)
    view = _view([stormy, calm], rates=[3.0, 0.05])  # three preemptions an hour against one a day
    ranking = rank(view, Requirements(gpu="H100"), WorkProfile(save_s=60, restart_s=120))
    best, second = ranking.candidates
    assert best.offering == calm and second.offering == stormy
    assert best.price_usd_per_hour > second.price_usd_per_hour
    assert best.goodput > second.goodput
    assert best.score < second.score
    # ... while by sticker price alone the stormy one would win.
    assert (
        second.factors["usd_per_effective_tflops_hour"]
        < best.factors["usd_per_effective_tflops_hour"]
    )


def test_the_score_is_the_formula_of_the_docstring() -> None:
    offering = make_offering(spot_price_usd_per_hour=2.0)
    (candidate,) = rank(_view([offering], rates=[0.5]), Requirements()).candidates
    f = candidate.factors
    assert candidate.score == pytest.approx(
        f["price_usd_per_hour"] / f["goodput"] / (f["effective_tflops_per_gpu"] * f["gpu_count"])
    )
    assert candidate.effective_tflops == pytest.approx(offering.effective_tflops_per_gpu)
    assert candidate.to_dict()["usd_per_useful_tflops_hour"] == candidate.score


def _two_clouds(saving: float) -> MarketView:
    home = make_offering(provider="alpha-sim", region="r1", zone="r1a", spot_price_usd_per_hour=2.0)
    away = make_offering(
        provider="beta-sim", region="s1", zone="s1a", spot_price_usd_per_hour=2.0 - saving
    )
    return _view([home, away], rates=[0.05, 0.05])


def test_a_cross_cloud_move_is_made_only_when_the_saving_pays_for_the_egress() -> None:
    table = egress_table()
    profile = WorkProfile(data_gib=20.0, data_location=("alpha-sim", "r1"), horizon_h=4.0)
    egress_usd = 20.0 * table.price_for("alpha-sim").internet_usd_per_gib
    assert egress_usd > 0
    # Four hours at a saving worth less than the bytes: stay; worth more: move.
    small = egress_usd / 4.0 * 0.5
    large = egress_usd / 4.0 * 2.0
    stay = rank(_two_clouds(small), Requirements(), profile).candidates[0]
    move = rank(_two_clouds(large), Requirements(), profile).candidates[0]
    assert stay.offering.provider == "alpha-sim" and stay.egress_usd == 0.0
    assert move.offering.provider == "beta-sim" and move.egress_usd == pytest.approx(egress_usd)
    # With no data to move, even the small saving moves the job.
    assert rank(_two_clouds(small), Requirements()).candidates[0].offering.provider == "beta-sim"


def test_egress_is_free_in_place_and_cheaper_between_regions_than_clouds() -> None:
    table = egress_table()
    assert table.usd_per_gib(("alpha", "r1"), ("alpha", "r1")) == 0.0
    inter = table.usd_per_gib(("alpha", "r1"), ("alpha", "r2"))
    out = table.usd_per_gib(("alpha", "r1"), ("beta", "r1"))
    assert 0 < inter < out
    assert table.as_of.year >= 2026


def test_on_demand_and_reserved_are_not_preempted_and_reserved_ranks_first() -> None:
    offering = make_offering(spot_price_usd_per_hour=1.0, on_demand_price_usd_per_hour=3.0)
    view = _view([offering], rates=[2.0])
    ranking = rank(
        view,
        Requirements(),
        kinds=list(MarketKind),
        reserved=[ReservedPool("fake", offering.instance_type, offering.zone)],
    )
    kinds = [c.market_kind for c in ranking.candidates]
    assert kinds == [MarketKind.RESERVED, MarketKind.SPOT, MarketKind.ON_DEMAND]
    assert ranking.candidates[0].preemption_rate_per_h == 0.0
    assert ranking.candidates[2].preemption_rate_per_h == 0.0


def test_a_spec_no_offering_satisfies_names_the_requirement_that_excluded_the_most() -> None:
    offerings = make_offerings(zones=("fake-1a", "fake-1b", "fake-1c"))
    ranking = rank(_view(offerings), Requirements(gpu="H100", gpus_per_node=8, zones=("fake-1a",)))
    assert not ranking
    assert ranking.excluded["gpus_per_node"] == 6
    assert ranking.excluded["zones"] == 4
    assert ranking.excluded["gpu"] == 3
    assert ranking.most_excluding == "gpus_per_node"
    with pytest.raises(NoCandidates, match="6 of 6 offerings fail gpus_per_node: 8") as caught:
        ranking.raise_if_empty()
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_no_capacity_now_is_told_apart_from_an_impossible_spec() -> None:
    offering = make_offering()
    view = MarketView(
        now=0.0,
        offerings=(offering,),
        markets={offering.market_id: MarketState(offering.market_id, available=False)},
    )
    ranking = rank(view, Requirements())
    assert ranking.most_excluding == "market"
    with pytest.raises(NoCapacityNow) as caught:
        ranking.raise_if_empty()
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert len(rank(view, Requirements(), kinds=["on-demand"])) == 1


def test_excluded_markets_are_skipped_in_every_kind_or_in_the_one_named() -> None:
    a, b = make_offerings()[:2]
    view = _view([a, b])
    both = ["spot", "on-demand"]
    assert len(rank(view, Requirements(), kinds=both)) == 4
    assert {
        c.market_id
        for c in rank(view, Requirements(), kinds=both, exclude={a.market_id}).candidates
    } == {b.market_id}
    only_spot = rank(view, Requirements(), kinds=both, exclude={(a.market_id, MarketKind.SPOT)})
    assert (a.market_id, MarketKind.ON_DEMAND) in {
        (c.market_id, c.market_kind) for c in only_spot.candidates
    }
    assert len(only_spot) == 3


def test_the_ranking_does_not_depend_on_the_order_of_the_offerings() -> None:
    offerings = [
        make_offering(zone=f"fake-1{z}", spot_price_usd_per_hour=price)
        for z in "abcdef"
        for price in (1.0,)
    ] + make_offerings()
    shuffled = list(offerings)
    random.Random(7).shuffle(shuffled)
    first = [
        (c.market_id, c.market_kind) for c in rank(_view(offerings), Requirements()).candidates
    ]
    second = [
        (c.market_id, c.market_kind) for c in rank(_view(shuffled), Requirements()).candidates
    ]
    assert first == second


def test_the_market_view_is_gathered_from_providers_and_the_reliability_book() -> None:
    stormy = make_offering(zone="fake-1a")
    calm = make_offering(zone="fake-1b")
    provider = FakeProvider(
        markets=[
            make_market(stormy, spot_price_usd_per_hour=1.2),
            make_market(calm, available=False),
        ]
    )
    book = ReliabilityBook.from_evidence(
        [MarketEvidence(stormy.market_id, stormy.gpu, instance_hours=100.0, preemptions=300)]
    )
    view = gather_market_view([provider], book)
    assert len(view.offerings) == 2
    state = view.state_of(stormy.market_id)
    assert state.spot_price_usd_per_hour == 1.2
    assert state.preemption_rate_per_h > 1.0
    assert view.state_of(calm.market_id).available is False
    assert view.state_of(MarketId("nowhere", "r", "", "t")).available is True
    (only,) = rank(view, Requirements()).candidates
    assert only.offering == stormy and only.price_usd_per_hour == 1.2


@given(
    st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0, float("inf")]), min_size=1, max_size=3000),
    st.lists(st.integers(0, 3000), max_size=5),
)
def test_the_lazy_order_is_always_a_prefix_of_the_full_stable_sort(
    scores: list[float], reads: list[int]
) -> None:
    score = np.array(scores)
    full = np.argsort(score, kind="stable")
    ranked = CandidateList(score, lambda j: j)  # type: ignore[arg-type,return-value]
    for read in reads:
        if read < len(scores):
            assert ranked[read] == full[read]
    assert list(ranked.positions(10)) == list(full[:10])
    assert list(ranked.positions()) == list(full)


def test_a_view_without_offerings_says_to_check_the_providers() -> None:
    with pytest.raises(NoCandidates, match="no provider listed any"):
        rank(MarketView(0.0, ()), Requirements()).raise_if_empty()


class _RegionalPrices(FakeProvider):
    """A cloud that prices spot per region: its spot prices carry no zone."""

    def spot_prices(self, instance_types=None):  # type: ignore[no-untyped-def]
        return [replace(p, zone=None) for p in super().spot_prices(instance_types)][:1]


def test_a_regional_spot_price_is_every_zones_price_and_boot_times_reach_the_score() -> None:
    a = make_offering(zone="fake-1a")
    b = make_offering(zone="fake-1b")
    provider = _RegionalPrices(
        markets=[make_market(a, spot_price_usd_per_hour=0.7), make_market(b)]
    )
    view = gather_market_view([provider], now=5.0, boot_s={"fake": 600.0})
    assert view.now == 5.0
    assert view.state_of(a.market_id).spot_price_usd_per_hour == 0.7
    assert view.state_of(b.market_id).spot_price_usd_per_hour == 0.7
    slow = rank(view, Requirements()).candidates[0]
    fast = rank(replace(view, boot_s={}), Requirements()).candidates[0]
    assert slow.factors["boot_s"] == 600.0 and fast.factors["boot_s"] == 120.0
    assert slow.goodput < fast.goodput


def test_the_book_may_be_asked_at_the_providers_time() -> None:
    offering = make_offering()
    asked: list[float] = []

    def book_at(now: float) -> ReliabilityBook:
        asked.append(now)
        return ReliabilityBook.from_evidence([])

    gather_market_view([FakeProvider(markets=[make_market(offering)])], book_at)
    assert asked == [0.0]  # the fake cloud's clock starts at 0
