"""Storms (a world's ``storms:``): scheduled capacity crunches on top of the markets' own weather."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spothop.errors import CapacityUnavailable, ConfigError
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.runtime import spot_market
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import load_world, parse_world
from spothop.providers.local.world_view import world_view
from tests.examples.conftest import EXAMPLES
from tests.waiting import scaled

CALM = "{mean_time_between_preemptions_s: 315360000, mean_outage_s: 600}"  # once a decade
WORLD = f"""
seed: 1
speed: 30
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 30
    launch_delay_s: 0
    locations: [us-east-1a, us-east-1b]
    instance_types: [g5.xlarge]
    market:
      synthetic: {CALM}
storms:
  - {{cloud: aws-sim, at_s: 600, duration_s: 300, locations: [us-east-1a]}}
  - {{cloud: aws-sim, at_s: 1000, duration_s: 100}}
"""
START = 1_000_000.0


def market_of(text: str):  # type: ignore[no-untyped-def]
    world = parse_world(text, "world.yaml")
    market = spot_market(CloudStore(), world, start_s=START)
    keys = {k.zone: k for k in market}
    return market, keys


def test_a_storm_takes_its_markets_capacity_for_its_window_only() -> None:
    market, keys = market_of(WORLD)
    a, b = keys["us-east-1a"], keys["us-east-1b"]
    assert market.is_available(a, START + 599) and not market.is_available(a, START + 600)
    assert not market.is_available(a, START + 899) and market.is_available(a, START + 900)
    assert market.is_available(b, START + 700)  # the first storm names us-east-1a only
    assert not market.is_available(b, START + 1050)  # the second takes the whole cloud
    assert market.is_available(b, START + 1100)


def test_drops_and_recoveries_count_the_storms() -> None:
    market, keys = market_of(WORLD)
    a, b = keys["us-east-1a"], keys["us-east-1b"]
    assert market.next_preemption_after(a, START) == START + 600
    assert market.next_preemption_after(b, START) == START + 1000
    # In a storm: the next drop is the one after capacity comes back.
    assert market.next_available_after(a, START + 700) == START + 900
    assert market.next_preemption_after(a, START + 700) == START + 1000
    assert market.next_available_after(a, START + 1000) == START + 1100
    assert market.next_preemption_after(a, START + 1200) is None  # a calm decade on from there


def test_a_world_without_storms_plays_its_markets_unchanged() -> None:
    calm = WORLD.split("storms:")[0]
    market, keys = market_of(calm)
    stormy, _ = market_of(WORLD)
    for t in (START, START + 650, START + 1050, START + 5000):
        for key in keys.values():
            assert market.price_usd_per_hour(key, t) == stormy.price_usd_per_hour(key, t)
    assert market.next_preemption_after(keys["us-east-1a"], START) is None


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            ("cloud: aws-sim, at_s: 600", "cloud: gcp-sim, at_s: 600"),
            "key storms.0.cloud: 'gcp-sim' is not a cloud of this world; use one of aws-sim",
        ),
        (
            ("[us-east-1a]}", "[us-east-1z]}"),
            "key storms.0.locations: 'us-east-1z' not among aws-sim's locations",
        ),
        (
            ("duration_s: 100}", "duration_s: 100, instance_types: [p3.2xlarge]}"),
            "key storms.1.instance_types: 'p3.2xlarge' not among aws-sim's instance_types",
        ),
        (("duration_s: 300", "duration_s: 0"), "key storms.0.duration_s: duration_s must be"),
        (("at_s: 600", "at_s: -1"), "key storms.0.at_s: at_s must be between 0"),
        (("at_s: 600, ", ""), "key storms.0.at_s: Field required"),
        (("duration_s: 300", "duration_s: 300, zone: x"), "key storms.0.zone"),
    ],
)
def test_a_bad_storm_is_a_clear_error(tmp_path: Path, change: tuple[str, str], needle: str) -> None:
    path = tmp_path / "world.yaml"
    path.write_text(WORLD.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_world(path)
    assert needle in str(info.value) and str(path) in str(info.value)


def test_a_storm_reclaims_the_instance_it_reaches_with_the_clouds_notice(
    tmp_path: Path, providers: list[LocalProvider]
) -> None:
    # Speed 30: the storm at 90 s is 3 wall seconds after the first launch, its notice 1 s before.
    path = tmp_path / "world.yaml"
    path.write_text(WORLD.replace("at_s: 600, duration_s: 300", "at_s: 90, duration_s: 86400"))
    provider = LocalProvider("aws-sim", world_path=path)
    providers.append(provider)
    instance = provider.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=[sys.executable, "-c", "import time; time.sleep(600)"],
        )
    )
    ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(60))
    assert ended.state is InstanceState.PREEMPTED
    row = provider.store.instance(instance.instance_id)
    assert row is not None and row["end_reason"] == "spot capacity reclaimed"
    assert row["notice_time"] is not None
    assert row["termination_time"] - row["notice_time"] <= 30  # the cloud's lead, at most
    # While it lasts (a day), a spot launch there fails with the cloud's own capacity error.
    with pytest.raises(CapacityUnavailable) as info:
        provider.launch(
            LaunchRequest(instance_type="g5.xlarge", region="us-east-1", zone="us-east-1a")
        )
    assert info.value.code == provider.codes.capacity_unavailable
    state = world_view(provider.world, {"aws-sim": provider}).storms[0].state
    assert state == "raging"


def test_the_world_view_lists_the_storms_and_where_they_stand(
    tmp_path: Path, providers: list[LocalProvider]
) -> None:
    path = tmp_path / "world.yaml"
    path.write_text(WORLD)
    provider = LocalProvider("aws-sim", world_path=path)
    providers.append(provider)
    # Before the first launch the markets have not started: every storm is ahead.
    storms = world_view(provider.world, {"aws-sim": provider}).to_dict()["storms"]
    assert [(s["locations"], s["markets"], s["state"]) for s in storms] == [
        (["us-east-1a"], 1, "ahead"),
        (None, 2, "ahead"),
    ]


def test_the_demo_worlds_storms_reach_the_two_clouds_its_job_starts_on() -> None:
    """The demo's scenario (examples/worlds/demo.yaml): at the start only Azure and GCP sell spot,
    so the job's two workers (spread over two clouds) start there; then each of the two loses all
    its markets in turn, while the other clouds have capacity for the replacement."""
    world = load_world(EXAMPLES / "worlds" / "demo.yaml")
    market = spot_market(CloudStore(), world, start_s=START)

    def up(cloud: str, t: float) -> int:
        return sum(market.is_available(k, START + t) for k in market if k.provider == cloud)

    assert {c for c in world.cloud_names if up(c, 0)} == {"azure-sim", "gcp-sim"}
    crunches = {s.cloud: (s.at_s, s.at_s + s.duration_s) for s in world.spec.storms}
    for cloud in ("azure-sim", "gcp-sim"):
        start, end = crunches[cloud]
        assert up(cloud, start) == up(cloud, end - 1) == 0
        others = [c for c in world.cloud_names if c != cloud]
        assert sum(up(c, start - 30) > 0 for c in others) >= 2  # where its replacement can go
