"""The provider contract (providers/base.py), run against every provider: the local cloud and the fake.

Each test asks one rule of the contract through the Provider interface only;
``tests/providers/conftest.py`` holds one harness per provider.
"""

from __future__ import annotations

import pytest

from spothop.errors import (
    CapacityUnavailable,
    InstanceNotFound,
    InvalidRequest,
    PriceTooLow,
    ProviderError,
)
from spothop.providers.base import MICROUSD_PER_USD, InstanceState, LaunchRequest
from spothop.providers.reservations import ReservedCapacity
from spothop.resources.offering import Offering
from tests.providers.conftest import Harness

ALIVE = frozenset({InstanceState.RUNNING})
ENDED = frozenset({InstanceState.TERMINATED})


def test_offerings_are_the_providers_own_and_launchable(harness: Harness) -> None:
    offerings = harness.provider.list_offerings()
    assert offerings and all(isinstance(o, Offering) for o in offerings)
    assert all(o.provider == harness.provider.name for o in offerings)
    sold = {(o.instance_type, o.zone) for o in offerings}
    assert (harness.spot.instance_type, harness.spot.zone) in sold
    prices = harness.provider.spot_prices([harness.spot.instance_type])
    assert prices and all(
        p.instance_type == harness.spot.instance_type and p.price_usd_per_hour > 0 for p in prices
    )


def test_a_spot_launch_returns_an_instance_that_exists(harness: Harness) -> None:
    instance = harness.provider.launch(harness.spot)
    assert harness.ids.matches(instance.instance_id), instance.instance_id
    assert (instance.provider, instance.instance_type, instance.zone, instance.spot) == (
        harness.provider.name,
        harness.spot.instance_type,
        harness.spot.zone,
        True,
    )
    assert instance.state in (InstanceState.PENDING, InstanceState.RUNNING)
    running = harness.wait_state(instance.instance_id, ALIVE)
    assert (
        running.instance_id == instance.instance_id and running.launched_at == instance.launched_at
    )


def test_an_on_demand_launch_is_priced_at_the_list_price(harness: Harness) -> None:
    instance = harness.provider.launch(harness.on_demand)
    offering = next(
        o
        for o in harness.provider.list_offerings()
        if (o.instance_type, o.zone) == (harness.on_demand.instance_type, harness.on_demand.zone)
    )
    assert not instance.spot
    assert instance.price_usd_per_hour == pytest.approx(offering.on_demand_price_usd_per_hour)


def test_no_capacity_is_a_typed_error_with_the_clouds_code_and_leaves_nothing(
    harness: Harness,
) -> None:
    before = {i.instance_id for i in harness.provider.list_instances()}
    with pytest.raises(CapacityUnavailable) as info:
        harness.provider.launch(harness.unavailable)
    error = info.value
    assert (error.provider, error.code) == (
        harness.provider.name,
        harness.codes.capacity_unavailable,
    )
    assert error.code in str(error) and error.cloud_message
    assert {i.instance_id for i in harness.provider.list_instances()} == before


def test_a_bid_under_the_market_is_price_too_low_with_the_clouds_code(harness: Harness) -> None:
    low = LaunchRequest(**{**harness.spot.__dict__, "max_price_usd_per_hour": 0.0001})
    with pytest.raises(PriceTooLow) as info:
        harness.provider.launch(low)
    assert info.value.code == harness.codes.bid_refused


def test_a_type_not_sold_there_is_an_invalid_request_naming_it(harness: Harness) -> None:
    bad = LaunchRequest(**{**harness.spot.__dict__, "instance_type": "no.such-type"})
    with pytest.raises(InvalidRequest, match=r"no\.such-type") as info:
        harness.provider.launch(bad)
    assert info.value.code == harness.codes.invalid_parameter


def test_describe_of_an_unknown_id_is_instance_not_found(harness: Harness) -> None:
    unknown = harness.ids.new()
    with pytest.raises(InstanceNotFound) as info:
        harness.provider.describe(unknown)
    assert info.value.code == harness.codes.instance_not_found


def test_list_shows_every_launched_instance_ended_or_not(harness: Harness) -> None:
    first = harness.provider.launch(harness.spot)
    second = harness.provider.launch(harness.on_demand)
    harness.wait_state(first.instance_id, ALIVE)
    harness.provider.terminate(first.instance_id)
    harness.wait_state(first.instance_id, ENDED)
    listed = {i.instance_id: i for i in harness.provider.list_instances()}
    assert {first.instance_id, second.instance_id} <= set(listed)
    assert listed[first.instance_id].state is InstanceState.TERMINATED
    assert listed[second.instance_id].state.is_alive


def test_terminate_is_idempotent_and_ignores_unknown_ids(harness: Harness) -> None:
    instance = harness.provider.launch(harness.spot)
    harness.wait_state(instance.instance_id, ALIVE)
    harness.provider.terminate(instance.instance_id)
    ended = harness.wait_state(instance.instance_id, ENDED)
    assert ended.ended_at is not None and ended.ended_at >= ended.launched_at
    harness.provider.terminate(instance.instance_id)
    harness.provider.terminate(harness.ids.new())
    assert harness.provider.describe(instance.instance_id).state is InstanceState.TERMINATED


# Long enough for a bill of many seconds, short enough for the local cloud (120x) to pass it in 1 s
# of wall time; billing stopping is shown by a second window that adds nothing.
BILLED_WINDOW_S = 120


def test_billing_is_integer_microdollars_at_the_instances_price_and_stops_at_the_end(
    harness: Harness,
) -> None:
    instance = harness.provider.launch(harness.on_demand)
    harness.wait_state(instance.instance_id, ALIVE)
    harness.pass_time(BILLED_WINDOW_S)
    running = harness.provider.describe(instance.instance_id)
    assert isinstance(running.cost_microusd, int) and running.cost_microusd > 0
    harness.provider.terminate(instance.instance_id)
    ended = harness.wait_state(instance.instance_id, ENDED)
    expected = ended.price_usd_per_hour * ended.billed_seconds / 3600 * MICROUSD_PER_USD
    assert ended.billed_seconds >= BILLED_WINDOW_S * 0.9
    assert ended.cost_microusd == pytest.approx(expected, rel=0.02)
    harness.pass_time(BILLED_WINDOW_S)
    later = harness.provider.describe(instance.instance_id)
    assert (later.billed_seconds, later.cost_microusd) == (
        ended.billed_seconds,
        ended.cost_microusd,
    )


def test_an_instance_serialises_itself(harness: Harness) -> None:
    instance = harness.provider.launch(harness.spot)
    data = instance.to_dict()
    assert data["instance_id"] == instance.instance_id and data["state"] == instance.state.value
    assert isinstance(data["cost_microusd"], int) and "cost_usd" not in data


# -- reserved capacity (providers/reservations.py) -------------------------------------


def test_an_unknown_reservation_is_refused_naming_it_and_leaves_nothing(harness: Harness) -> None:
    """Every provider, with reserved pools or without, refuses a pool it does not hold."""
    before = {i.instance_id for i in harness.provider.list_instances()}
    request = LaunchRequest(
        **{**harness.on_demand.__dict__, "spot": False, "reservation": "cr-no-such-pool"}
    )
    with pytest.raises(ProviderError, match="cr-no-such-pool"):
        harness.provider.launch(request)
    assert {i.instance_id for i in harness.provider.list_instances()} == before


def _reserved(harness: Harness) -> tuple[ReservedCapacity, LaunchRequest]:
    if harness.reserved is None or not isinstance(harness.provider, ReservedCapacity):
        pytest.skip(f"{harness.provider.name} holds no reserved pools")
    return harness.provider, harness.reserved


def test_a_reserved_launch_runs_at_the_pools_rate_where_spot_has_no_capacity(
    harness: Harness,
) -> None:
    provider, request = _reserved(harness)
    [pool] = [p for p in provider.list_reservations() if p.reservation_id == request.reservation]
    assert (pool.instance_type, pool.zone, pool.count, pool.in_use) == (
        request.instance_type,
        request.zone,
        1,
        0,
    )
    assert pool.to_dict()["free"] == 1
    instance = harness.provider.launch(request)
    assert not instance.spot
    assert instance.price_usd_per_hour == pytest.approx(pool.price_usd_per_hour)
    harness.wait_state(instance.instance_id, ALIVE)
    # The spot market of that type has no capacity (harness.unavailable): the reserved one is untouched.
    harness.pass_time(600)
    running = harness.provider.describe(instance.instance_id)
    assert running.state is InstanceState.RUNNING and running.notice_time is None
    expected = pool.price_usd_per_hour * running.billed_seconds / 3600 * MICROUSD_PER_USD
    assert running.cost_microusd == pytest.approx(expected, rel=0.02)


def test_a_full_pool_refuses_with_the_capacity_code_until_a_slot_frees(harness: Harness) -> None:
    provider, request = _reserved(harness)
    first = harness.provider.launch(request)
    assert [p.in_use for p in provider.list_reservations()] == [1]
    with pytest.raises(CapacityUnavailable, match=str(request.reservation)) as info:
        harness.provider.launch(request)
    assert info.value.code == harness.codes.capacity_unavailable
    harness.provider.terminate(first.instance_id)
    harness.wait_state(first.instance_id, ENDED)
    assert [p.in_use for p in provider.list_reservations()] == [0]
    second = harness.provider.launch(request)
    assert second.instance_id != first.instance_id


def test_a_reserved_launch_must_fit_its_pool(harness: Harness) -> None:
    _, request = _reserved(harness)
    for change, says in (
        ({"spot": True}, "spot=False"),
        ({"instance_type": harness.spot.instance_type}, harness.spot.instance_type),
    ):
        with pytest.raises(InvalidRequest, match=says) as info:
            harness.provider.launch(LaunchRequest(**{**request.__dict__, **change}))
        assert info.value.code == harness.codes.invalid_parameter
