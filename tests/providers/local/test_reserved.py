"""The local cloud's reserved pools: declared in the world file, filled to their count, never preempted."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from spothop.errors import CapacityUnavailable, ConfigError, InvalidRequest
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world

WORLD = """
seed: 3
speed: 60
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    launch_delay_s: 1
    locations: [us-east-1a, us-east-1b]
    instance_types: [g5.xlarge]
    market:
      synthetic: {mean_time_between_preemptions_s: 3600, mean_outage_s: 600}
    reserved:
      - instance_type: g5.xlarge
        location: us-east-1a
        count: 2
        price_usd_per_hour: 0.4
"""
POOL = "us-east-1a/g5.xlarge"  # the default id: location / instance type


def _provider(world_file, providers: list[LocalProvider], text: str = WORLD) -> LocalProvider:  # type: ignore[no-untyped-def]
    path: Path = world_file(text)
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(provider)
    return provider


def _request(zone: str | None = "us-east-1a", **changes: object) -> LaunchRequest:
    fields: dict[str, object] = {
        "instance_type": "g5.xlarge",
        "region": "us-east-1",
        "zone": zone,
        "spot": False,
        "bootstrap_command": ["sleep", "600"],
        "reservation": POOL,
        **changes,
    }
    return LaunchRequest(**fields)  # type: ignore[arg-type]


def test_a_pool_has_a_default_id_and_is_listed_with_its_use(world_file, providers) -> None:  # type: ignore[no-untyped-def]
    provider = _provider(world_file, providers)
    [pool] = provider.list_reservations()
    assert (pool.reservation_id, pool.region, pool.zone, pool.count, pool.in_use) == (
        POOL,
        "us-east-1",
        "us-east-1a",
        2,
        0,
    )
    assert pool.price_usd_per_hour == 0.4
    # zone None: the pool's zone.
    instance = provider.launch(_request(zone=None))
    assert (instance.zone, instance.spot, instance.price_usd_per_hour) == ("us-east-1a", False, 0.4)
    assert [p.in_use for p in provider.list_reservations()] == [1]


def test_launches_racing_for_a_pool_get_no_more_than_its_count(world_file, providers) -> None:  # type: ignore[no-untyped-def]
    provider = _provider(world_file, providers)
    outcomes: list[str] = []
    barrier = threading.Barrier(3)

    def launch() -> None:
        barrier.wait()
        try:
            provider.launch(_request())
            outcomes.append("launched")
        except CapacityUnavailable as exc:
            assert POOL in str(exc) and exc.code == provider.codes.capacity_unavailable
            outcomes.append("full")

    threads = [threading.Thread(target=launch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["full", "launched", "launched"]
    assert [p.in_use for p in provider.list_reservations()] == [2]
    assert len(provider.list_instances()) == 2  # the refused launch left nothing behind


def test_a_reserved_instance_is_never_preempted_by_hand_either(world_file, providers) -> None:  # type: ignore[no-untyped-def]
    provider = _provider(world_file, providers)
    instance = provider.launch(_request())
    with pytest.raises(ConfigError, match=f"reserved pool '{POOL}'.*never preempted"):
        provider.preempt(instance.instance_id, lead_time_s=30)
    assert provider.describe(instance.instance_id).state in (
        InstanceState.PENDING,
        InstanceState.RUNNING,
    )


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"zone": "us-east-1b"}, f"reservation '{POOL}' is in us-east-1a, not us-east-1b"),
        ({"reservation": "cr-other"}, f"no reservation 'cr-other' (reservations here: {POOL})"),
        ({"spot": True}, "launch with spot=False"),
    ],
)
def test_a_launch_that_does_not_fit_the_pool_says_why(
    world_file, providers, changes, needle
) -> None:  # type: ignore[no-untyped-def]
    provider = _provider(world_file, providers)
    with pytest.raises(InvalidRequest) as info:
        provider.launch(_request(**changes))
    assert needle in str(info.value)
    assert provider.list_instances() == []


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            ("location: us-east-1a\n        count", "location: eu-west-1a\n        count"),
            "reserved pool g5.xlarge in eu-west-1a is not a market of this cloud",
        ),
        (("count: 2", "count: 0"), "key clouds.0.reserved.0.count"),
        (
            ("price_usd_per_hour: 0.4", "price_usd_per_hour: -1"),
            "key clouds.0.reserved.0.price_usd_per_hour",
        ),
        (("count: 2", "count: 2\n        colour: red"), "key clouds.0.reserved.0.colour"),
        (
            (
                "price_usd_per_hour: 0.4\n",
                "price_usd_per_hour: 0.4\n      - {instance_type: g5.xlarge, location: us-east-1a, count: 1, price_usd_per_hour: 0.5}\n",
            ),
            f"reserved pools repeat the id {POOL}; give each pool its own 'id'",
        ),
    ],
)
def test_bad_reserved_entries_name_the_key_and_the_fix(world_file, change, needle) -> None:  # type: ignore[no-untyped-def]
    path = world_file(WORLD.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_world(path)
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_a_pool_of_a_type_not_sold_in_its_location_is_refused(world_file) -> None:  # type: ignore[no-untyped-def]
    # A location the cloud lists but where the catalog sells nothing: the pool could hold nothing.
    text = WORLD.replace(
        "locations: [us-east-1a, us-east-1b]", "locations: [us-east-1a, mars-1a]"
    ).replace("location: us-east-1a\n        count", "location: mars-1a\n        count")
    with pytest.raises(
        ConfigError,
        match=r"key clouds\.0\.reserved\.0: the aws catalog does not sell g5\.xlarge in mars-1a",
    ):
        load_world(world_file(text))
