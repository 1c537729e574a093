"""What the fake provider scripts beyond the contract: errors, quotas, capacity, notices, prices."""

from __future__ import annotations

import pytest

from spothop.errors import AuthFailed, CapacityUnavailable, ConfigError, QuotaExceeded, RateLimited
from spothop.market import ManualClock
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.registry import get_provider, provider_names
from spothop.testing import (
    FAKE_QUOTA_EXCEEDED,
    FakeProvider,
    make_instance,
    make_market,
    make_markets,
    make_offering,
)

H100 = LaunchRequest(instance_type="gpu.h100x1", region="fake-1", zone="fake-1a")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


@pytest.fixture
def fake(clock: ManualClock) -> FakeProvider:
    return FakeProvider(clock=clock, launch_delay_s=10)


def test_an_instance_is_pending_for_the_launch_delay_then_running(
    fake: FakeProvider, clock: ManualClock
) -> None:
    instance = fake.launch(H100)
    assert instance.state is InstanceState.PENDING
    clock.advance(9.5)
    assert fake.describe(instance.instance_id).state is InstanceState.PENDING
    clock.advance(1)
    assert fake.describe(instance.instance_id).state is InstanceState.RUNNING


def test_scripted_errors_come_in_order_once_each_and_only_where_they_match(
    fake: FakeProvider,
) -> None:
    fake.fail_next(RateLimited("fake", "Throttling", "slow down", retry_after_s=2))
    fake.fail_next(AuthFailed("fake", "ExpiredToken", "token expired"), zone="fake-1b")
    with pytest.raises(RateLimited) as first:
        fake.launch(H100)
    assert (first.value.code, first.value.retry_after_s) == ("Throttling", 2)
    fake.launch(H100)  # the zone-b error does not apply in zone a
    with pytest.raises(AuthFailed, match="ExpiredToken"):
        fake.launch(LaunchRequest(instance_type="gpu.h100x1", region="fake-1", zone="fake-1b"))
    fake.launch(LaunchRequest(instance_type="gpu.h100x1", region="fake-1", zone="fake-1b"))
    assert len(fake.requests) == 4


def test_a_full_market_refuses_spot_until_an_instance_ends(clock: ManualClock) -> None:
    fake = FakeProvider(markets=[make_market(capacity=1)], clock=clock)
    first = fake.launch(H100)
    with pytest.raises(CapacityUnavailable) as info:
        fake.launch(H100)
    assert info.value.code == fake.codes.capacity_unavailable
    assert not fake.spot_prices()[0].available
    assert (
        fake.launch(LaunchRequest(**{**H100.__dict__, "spot": False})).spot is False
    )  # on-demand is not capped
    fake.terminate(first.instance_id)
    assert fake.launch(H100).state is InstanceState.PENDING


def test_a_closed_market_refuses_spot_and_reopens(fake: FakeProvider) -> None:
    fake.set_available("gpu.h100x1", False, "fake-1a")
    with pytest.raises(CapacityUnavailable):
        fake.launch(H100)
    fake.set_available("gpu.h100x1", True, "fake-1a")
    fake.launch(H100)


def test_the_gpu_quota_counts_alive_instances_of_one_market_kind(clock: ManualClock) -> None:
    eight = make_offering(
        instance_type="gpu.h100x8",
        gpu_count=8,
        on_demand_price_usd_per_hour=32.0,
        spot_price_usd_per_hour=12.0,
    )
    fake = FakeProvider(markets=[make_market(eight)], clock=clock, gpu_quota={"spot": 8})
    request = LaunchRequest(instance_type="gpu.h100x8", region="fake-1", zone="fake-1a")
    first = fake.launch(request)
    with pytest.raises(QuotaExceeded, match="quota is 8; 8 in use") as info:
        fake.launch(request)
    assert info.value.code == FAKE_QUOTA_EXCEEDED
    fake.launch(
        LaunchRequest(**{**request.__dict__, "spot": False})
    )  # on-demand has its own quota (none)
    fake.terminate(first.instance_id)
    fake.launch(request)
    with pytest.raises(ConfigError, match="gpu_quota takes the keys"):
        FakeProvider(gpu_quota={"gpus": 8})


def test_a_preemption_gives_the_notice_then_takes_the_instance_at_its_deadline(
    fake: FakeProvider, clock: ManualClock
) -> None:
    instance = fake.launch(H100)
    clock.advance(100)
    fake.preempt(instance.instance_id, lead_time_s=120, advance_s=60, at_s=200)
    assert (
        fake.describe(instance.instance_id).notice_time is None
    )  # scripted for later: not shown yet
    assert fake.advance_notice_time(instance.instance_id) == 200
    clock.advance(160)  # t = 260: the final notice
    noticed = fake.describe(instance.instance_id)
    assert noticed.state is InstanceState.NOTICED
    assert (noticed.notice_time, noticed.termination_time) == (260, 380)
    clock.advance(120)
    taken = fake.describe(instance.instance_id)
    assert (taken.state, taken.ended_at) == (InstanceState.PREEMPTED, 380)
    assert taken.billed_seconds == 370  # running from t = 10 to the reclaim
    fake.terminate(instance.instance_id)  # already ended: nothing changes
    assert fake.describe(instance.instance_id).state is InstanceState.PREEMPTED
    with pytest.raises(ConfigError, match="only a live instance"):
        fake.preempt(instance.instance_id)


def test_bad_preemptions_are_config_errors(fake: FakeProvider, clock: ManualClock) -> None:
    instance = fake.launch(H100)
    clock.advance(50)
    with pytest.raises(ConfigError, match="in the past"):
        fake.preempt(instance.instance_id, at_s=10)
    with pytest.raises(ConfigError, match="lead_time_s must be >= 0"):
        fake.preempt(instance.instance_id, lead_time_s=-1)
    quiet = FakeProvider(clock=clock, advance_notice=False)
    other = quiet.launch(H100)
    with pytest.raises(ConfigError, match="advance"):
        quiet.preempt(other.instance_id, advance_s=30)


def test_a_failed_instance_ends_at_once(fake: FakeProvider, clock: ManualClock) -> None:
    instance = fake.launch(H100)
    clock.advance(20)
    failed = fake.fail(instance.instance_id)
    assert (failed.state, failed.ended_at) == (InstanceState.FAILED, 20)


def test_spot_billing_pays_each_price_for_its_own_seconds(
    fake: FakeProvider, clock: ManualClock
) -> None:
    fake.set_spot_price("gpu.h100x1", 3.6, "fake-1a")  # 3.6 USD/h: 1,000 micro-dollars a second
    instance = fake.launch(H100)
    clock.advance(10 + 100)  # 100 s at 3.6 USD/h
    fake.set_spot_price("gpu.h100x1", 7.2, "fake-1a")
    clock.advance(50)  # 50 s at 7.2 USD/h
    fake.terminate(instance.instance_id)
    clock.advance(1000)
    ended = fake.describe(instance.instance_id)
    assert ended.billed_seconds == 150
    assert ended.cost_microusd == 100 * 1000 + 50 * 2000
    prices = {p.zone: p.price_usd_per_hour for p in fake.spot_prices(["gpu.h100x1"])}
    assert prices == {"fake-1a": 7.2, "fake-1b": 1.6}


def test_a_price_change_before_the_last_is_refused(fake: FakeProvider, clock: ManualClock) -> None:
    market = fake.market("gpu.h100x1", "fake-1a")
    market.set_price(2.0, 100)
    with pytest.raises(ConfigError, match="in time order"):
        market.set_price(2.5, 50)
    with pytest.raises(ConfigError, match="finite number"):
        market.set_price(float("nan"), 200)


def test_markets_must_belong_to_the_provider() -> None:
    with pytest.raises(ConfigError, match="make it with provider='other'"):
        FakeProvider("other", markets=make_markets())
    assert (
        FakeProvider("other", markets=make_markets(provider="other")).list_offerings()[0].provider
        == "other"
    )


def test_the_fake_is_in_the_registry_by_name(clock: ManualClock) -> None:
    assert "fake" in provider_names()
    provider = get_provider(
        "fake", clock=clock, world_path=None
    )  # options of other families are ignored
    assert isinstance(provider, FakeProvider) and provider.clock is clock
    assert get_provider("fake") is not get_provider("fake")  # a new, empty cloud each time


def test_factories_make_valid_types_with_any_field_overridden() -> None:
    offering = make_offering(
        gpu_count=8, spot_price_usd_per_hour=9.0, on_demand_price_usd_per_hour=20.0
    )
    assert (offering.gpu_count, offering.usd_per_gpu_hour(spot=True)) == (8, 9.0 / 8)
    instance = make_instance(state=InstanceState.NOTICED, notice_time=5.0)
    assert instance.state is InstanceState.NOTICED and instance.to_dict()["state"] == "noticed"
    assert {m.offering.zone for m in make_markets()} == {"fake-1a", "fake-1b"}


def test_the_documented_fallback_to_on_demand_bills_the_list_price() -> None:
    clock = ManualClock()
    provider = FakeProvider(markets=[make_market(make_offering(), available=False)], clock=clock)
    request = LaunchRequest("gpu.h100x1", "fake-1", "fake-1a")
    try:
        instance = provider.launch(request)
    except CapacityUnavailable:
        instance = provider.launch(LaunchRequest(**{**request.__dict__, "spot": False}))
    assert not instance.spot
    clock.advance(3600 + 30)
    assert provider.describe(instance.instance_id).cost_microusd == 4_000_000


def test_reserved_pools_must_be_sold_and_are_never_preempted(clock: ManualClock) -> None:
    from spothop.providers.reservations import Reservation

    market = make_market(make_offering(instance_type="gpu.a"))
    with pytest.raises(
        ConfigError, match=r"reservation 'cr-1' .* is not of an offering 'fake' sells"
    ):
        FakeProvider(
            markets=[market],
            clock=clock,
            reservations=[Reservation("cr-1", "fake", "fake-1", "fake-1a", "gpu.b", 1, 1.0)],
        )
    pool = Reservation("cr-1", "fake", "fake-1", "fake-1a", "gpu.a", 1, 1.0, in_use=7)
    fake = FakeProvider(markets=[market], clock=clock, reservations=[pool])
    assert [p.in_use for p in fake.list_reservations()] == [0]
    instance = fake.launch(
        LaunchRequest(
            instance_type="gpu.a", region="fake-1", zone=None, spot=False, reservation="cr-1"
        )
    )
    with pytest.raises(
        ConfigError, match="reserved pool 'cr-1': reserved capacity is never preempted"
    ):
        fake.preempt(instance.instance_id)
    clock.advance(3600)
    assert fake.describe(instance.instance_id).cost_microusd == pytest.approx(
        1_000_000 * (3600 - fake.launch_delay_s) / 3600, rel=1e-6
    )
