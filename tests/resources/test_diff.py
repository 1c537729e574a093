import pytest

from spothop.resources.catalog import Catalog, builtin_offerings
from spothop.resources.diff import (
    OfferingAdded,
    OfferingRemoved,
    PriceChanged,
    SpecChanged,
    apply_changes,
    change_json,
    diff_catalogs,
)


@pytest.fixture
def old():
    return builtin_offerings()[:30]


def test_identical_catalogs_have_no_changes(old):
    assert diff_catalogs(old, list(old)) == []


def test_each_kind_of_change_is_a_typed_event(old):
    new = list(old)
    removed = new.pop(0)
    added = old[1].model_copy(update={"zone": "zz-test-9z"})
    new.append(added)
    moved = new[0]
    new[0] = moved.model_copy(
        update={"on_demand_price_usd_per_hour": moved.on_demand_price_usd_per_hour * 1.25}
    )
    respec = new[1]
    new[1] = respec.model_copy(update={"memory_gib": respec.memory_gib * 2})
    changes = diff_catalogs(old, new)
    kinds = {type(c) for c in changes}
    assert kinds == {OfferingAdded, OfferingRemoved, PriceChanged, SpecChanged}
    price = next(c for c in changes if isinstance(c, PriceChanged))
    assert price.market == "on_demand" and price.change_pct == pytest.approx(25.0)
    assert "+25.0 %" in price.describe()
    spec = next(c for c in changes if isinstance(c, SpecChanged))
    assert (spec.field, spec.new) == ("memory_gib", respec.memory_gib * 2)
    assert next(c for c in changes if isinstance(c, OfferingRemoved)).offering == removed
    assert change_json(price)["change_pct"] == pytest.approx(25.0)


def test_small_price_moves_below_threshold_are_ignored(old):
    new = [
        o.model_copy(update={"on_demand_price_usd_per_hour": o.on_demand_price_usd_per_hour * 1.01})
        for o in old
    ]
    assert len(diff_catalogs(old, new)) == len(old)
    assert diff_catalogs(old, new, min_price_change_pct=2.0) == []


def test_spot_market_closing_is_always_reported(old):
    spotty = next(o for o in old if o.spot_price_usd_per_hour is not None)
    new = [
        o if o is not spotty else o.model_copy(update={"spot_price_usd_per_hour": None})
        for o in old
    ]
    (change,) = diff_catalogs(old, new, min_price_change_pct=50)
    assert isinstance(change, PriceChanged) and change.new_usd_per_hour is None
    assert "closed" in change.describe()


def test_applying_the_diff_turns_old_into_new(old):
    new = [
        o.model_copy(update={"spot_price_usd_per_hour": None}) if i % 3 == 0 else o
        for i, o in enumerate(old[5:])
    ]
    new.append(old[0].model_copy(update={"region": "elsewhere-1"}))
    applied = apply_changes(Catalog(old), diff_catalogs(old, new))
    assert sorted(o.market_id for o in applied) == sorted(o.market_id for o in new)
    by_key = {o.market_id: o for o in new}
    for o in applied:
        assert o.spot_price_usd_per_hour == by_key[o.market_id].spot_price_usd_per_hour
