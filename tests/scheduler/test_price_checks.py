"""A spot price that cannot be true is taken as missing, with a note, and never ranked first."""

from __future__ import annotations

import math

import numpy as np

from spothop.jobs.spec import load_job
from spothop.market import ManualClock
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind, gather_market_view, offering_columns
from spothop.scheduler.placement import rank
from spothop.scheduler.price_checks import IMPLAUSIBLE_PRICE_FRACTION, implausible_spot
from spothop.service.plan import plan
from spothop.testing import FakeProvider, make_market, make_offerings

H100 = "gpu.h100x1"  # catalog: USD 4.00/h on-demand (the H100's lowest), 1.60/h spot
A100 = "gpu.a100x1"  # catalog: USD 2.50/h on-demand, 0.90/h spot
ZONE = "fake-1a"


def _provider() -> FakeProvider:
    offerings = make_offerings()
    return FakeProvider(markets=[make_market(o) for o in offerings], clock=ManualClock())


def test_a_price_far_below_the_catalog_is_missing_with_a_note_and_not_ranked_first() -> None:
    provider = _provider()
    provider.set_spot_price(H100, 0.00001, ZONE)  # what moto's EC2 answers
    notes: list[str] = []
    view = gather_market_view([provider], on_note=notes.append)
    market = MarketId("fake", "fake-1", ZONE, H100)
    assert view.state_of(market).spot_price_usd_per_hour is None  # missing, not 0.00001
    (note,) = notes
    assert "fake: 1 spot price(s) cannot be true" in note and f"{H100} in {ZONE}" in note
    assert "USD 1e-05/h" in note
    ranking = rank(view, load_job({"name": "t", "run": "x"}).requirements(), kinds=["spot"])
    assert ranking.candidates  # the other markets
    assert market not in {c.market_id for c in ranking.candidates}  # no spot price: not ranked
    assert all(c.price_usd_per_hour >= 0.5 for c in ranking.candidates)


def test_a_cheap_but_possible_price_is_kept() -> None:
    provider = _provider()
    cheap = 4.00 * IMPLAUSIBLE_PRICE_FRACTION * 1.5  # above the floor, far below the catalog
    provider.set_spot_price(H100, cheap, ZONE)
    notes: list[str] = []
    view = gather_market_view([provider], on_note=notes.append)
    assert view.state_of(MarketId("fake", "fake-1", ZONE, H100)).spot_price_usd_per_hour == cheap
    assert notes == []


def test_prices_not_finite_or_not_above_zero_are_missing() -> None:
    columns = offering_columns(make_offerings(zones=(ZONE,)))
    types = [o.instance_type for o in columns.offerings]
    spot = np.array([math.inf if t == H100 else 0.0 for t in types])
    notes: list[str] = []
    assert implausible_spot(columns, spot, notes.append).all()
    assert np.isnan(spot).all()  # not taken
    (note,) = notes
    assert note.startswith("fake: 2 spot price(s) cannot be true")
    untouched = np.full(len(types), math.nan)  # not reported: the catalog's prices are fine
    assert not implausible_spot(columns, untouched, notes.append).any()
    assert len(notes) == 1


def test_plan_says_so() -> None:
    provider = _provider()
    provider.set_spot_price(A100, 0.00001, ZONE)
    said: list[str] = []
    spec = load_job({"name": "t", "run": "x", "market": "spot"})
    result = plan(spec, [provider], limit=3, warn=said.append)
    assert any("cannot be true" in s and A100 in s for s in said)
    first = result.ranking.candidates[0]
    assert first.market_kind is MarketKind.SPOT and first.price_usd_per_hour > 0.01
