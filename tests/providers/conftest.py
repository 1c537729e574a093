"""Harnesses for the provider conformance suite: one per provider, the same questions to each.

A :class:`Harness` gives the suite what it cannot ask through the Provider
interface alone: a launchable spot and on-demand request, a spot request the
market refuses for capacity right now, the cloud's own error codes and id
shape, and how to let provider time pass (the fake advances its clock; the
local cloud's clock runs on the wall, so the harness waits for it). A real
adapter joins the suite with one more harness here, run against its SDK's fake.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.market import ManualClock
from spothop.providers.base import Instance, InstanceState, LaunchRequest, Provider
from spothop.providers.fake.provider import FAKE_INSTANCE_IDS
from spothop.providers.local.metadata import PROTOCOLS
from spothop.providers.local.metadata.codes import ErrorCodes, InstanceIdShape
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from spothop.providers.reservations import Reservation
from spothop.testing import FakeProvider, make_market, make_offering
from tests.waiting import wait_for

PROVIDERS = ["local", "fake", "aws", "gcp", "aliyun"]


@dataclass
class Harness:
    provider: Provider
    spot: LaunchRequest
    on_demand: LaunchRequest
    unavailable: LaunchRequest  # a spot launch its market refuses for capacity now
    codes: ErrorCodes
    ids: InstanceIdShape
    pass_time: Callable[[float], None]  # let this many seconds of provider time pass
    wait_state: Callable[
        [str, frozenset[InstanceState]], Instance
    ]  # until the instance is in one of them
    # A launch into a reserved pool of one slot, in a market with no spot capacity (None: no pools).
    reserved: LaunchRequest | None = None


# -- the local cloud: a world of one cloud, two markets, fixed by traces ---------

# Can't Be Late 1-node polarity: 1 is unavailable, 0 available; an hour a tick, 40 days.
_TICKS = 960
_LOCAL_WORLD = """
seed: 1
speed: {speed}
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    launch_delay_s: 1
    locations: [us-east-1a]
    instance_types: [g5.xlarge, p3.2xlarge]
    market:
      trace: {up}
      kind: unavailable_flag
      start_offset_s: 0
    markets:
      - location: us-east-1a
        instance_type: p3.2xlarge
        trace: {down}
        kind: unavailable_flag
        start_offset_s: 0
    reserved:
      - instance_type: p3.2xlarge
        location: us-east-1a
        count: 1
        price_usd_per_hour: {reserved_price}
        id: {reservation}
"""
# The reserved pool of both harnesses: one slot, in the market whose spot capacity is gone.
RESERVATION = "cr-conformance"
RESERVED_PRICE_USD_PER_HOUR = 1.25
# Simulated seconds per wall second: billing shows in a short test without a long sleep.
LOCAL_SPEED = 120.0


def _trace(path: Path, flag: int) -> Path:
    path.write_text(json.dumps({"metadata": {"gap_seconds": 3600}, "data": [flag] * _TICKS}))
    return path


def _local(tmp_path: Path) -> Iterator[Harness]:
    up = _trace(tmp_path / "up_1node.json", 0)
    down = _trace(tmp_path / "down_1node.json", 1)
    world_path = tmp_path / "world.yaml"
    world_path.write_text(
        _LOCAL_WORLD.format(
            speed=LOCAL_SPEED,
            up=up,
            down=down,
            reserved_price=RESERVED_PRICE_USD_PER_HOUR,
            reservation=RESERVATION,
        )
    )
    provider = LocalProvider("aws-sim", world=load_world(world_path), world_path=world_path)

    def request(
        instance_type: str, spot: bool = True, reservation: str | None = None
    ) -> LaunchRequest:
        return LaunchRequest(
            instance_type=instance_type,
            region="us-east-1",
            zone="us-east-1a",
            spot=spot,
            bootstrap_command=["sleep", "600"],
            reservation=reservation,
        )

    def pass_time(seconds: float) -> None:
        target = provider.clock.now() + seconds
        wait_for(
            lambda: provider.clock.now() >= target,
            timeout_s=seconds / LOCAL_SPEED + 10,
            what=f"{seconds} s of the local cloud's time",
        )

    def wait_state(instance_id: str, states: frozenset[InstanceState]) -> Instance:
        return wait_for(
            lambda: (i := provider.describe(instance_id)).state in states and i,
            timeout_s=20,
            what=f"{instance_id} in {sorted(states)}",
        )

    yield Harness(
        provider=provider,
        spot=request("g5.xlarge"),
        on_demand=request("g5.xlarge", spot=False),
        unavailable=request("p3.2xlarge"),
        codes=PROTOCOLS["aws"].ERROR_CODES,
        ids=PROTOCOLS["aws"].INSTANCE_IDS,
        pass_time=pass_time,
        wait_state=wait_state,
        reserved=request("p3.2xlarge", spot=False, reservation=RESERVATION),
    )
    for instance in provider.list_instances():
        provider.terminate(instance.instance_id)
    for instance in provider.list_instances():
        wait_for(
            lambda i=instance: not provider.describe(i.instance_id).state.is_alive,
            timeout_s=20,
            what=f"{instance.instance_id} ended",
        )


# -- the fake: two markets, one of them closed -------------------------------------


def _fake() -> Iterator[Harness]:
    clock = ManualClock(1_000_000.0)
    open_market = make_market(make_offering(instance_type="gpu.open"))
    closed = make_market(make_offering(instance_type="gpu.closed"), available=False)
    pool = Reservation(
        RESERVATION, "fake", "fake-1", "fake-1a", "gpu.closed", 1, RESERVED_PRICE_USD_PER_HOUR
    )
    provider = FakeProvider(markets=[open_market, closed], clock=clock, reservations=[pool])

    def request(
        instance_type: str, spot: bool = True, reservation: str | None = None
    ) -> LaunchRequest:
        return LaunchRequest(
            instance_type=instance_type,
            region="fake-1",
            zone="fake-1a",
            spot=spot,
            reservation=reservation,
        )

    def wait_state(instance_id: str, states: frozenset[InstanceState]) -> Instance:
        for _ in range(100):  # a fake instance changes state only as its clock moves
            instance = provider.describe(instance_id)
            if instance.state in states:
                return instance
            clock.advance(1)
        pytest.fail(f"{instance_id} never reached {sorted(states)}")

    yield Harness(
        provider=provider,
        spot=request("gpu.open"),
        on_demand=request("gpu.open", spot=False),
        unavailable=request("gpu.closed"),
        codes=provider.codes,
        ids=FAKE_INSTANCE_IDS,
        pass_time=clock.advance,
        wait_state=wait_state,
        reserved=request("gpu.closed", spot=False, reservation=RESERVATION),
    )


@pytest.fixture(params=PROVIDERS)
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    if request.param == "aws":  # EC2 on moto: tests/providers/aws/moto_cloud.py
        from tests.providers.aws.moto_cloud import conformance_harness

        yield from conformance_harness(monkeypatch, tmp_path, Harness)
    elif request.param == "gcp":  # Compute Engine on its fake REST API: tests/providers/gcp/
        pytest.importorskip("google.cloud.compute_v1")
        from tests.providers.gcp.fake_compute import conformance_harness as gcp_harness

        yield from gcp_harness(Harness)
    elif request.param == "aliyun":  # ECS on its fake RPC API: tests/providers/aliyun/
        pytest.importorskip("alibabacloud_ecs20140526")
        from tests.providers.aliyun.fake_ecs import conformance_harness as aliyun_harness

        yield from aliyun_harness(monkeypatch, Harness)
    elif request.param == "local":
        yield from _local(tmp_path)
    else:
        yield from _fake()
