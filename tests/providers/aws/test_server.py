"""The EC2 provider against moto's standalone server (HTTP on a free port), as a real endpoint is reached.

One server for the module; each test tags its own instances and looks only at those.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.errors import CapacityUnavailable
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.extensions import FleetRequest
from tests.providers.aws.moto_cloud import (
    FAKE_SECRET,
    REGION,
    ShiftedClock,
    make_provider,
    moto_server,
)

AGENT = ["python", "-m", "spothop.agent", "run", "--", "sleep", "600"]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.providers.aws.moto_cloud import fake_credentials

    fake_credentials(monkeypatch, tmp_path)


def test_launch_describe_list_fleet_and_terminate_through_the_server(
    endpoint: str, creds: None
) -> None:
    clock = ShiftedClock()
    provider, market = make_provider(clock, endpoint_url=endpoint, page_size=5)
    job = {"spothop-job": "j-server", "spothop-token": "tok-server"}
    spot = provider.launch(
        LaunchRequest(
            "g5.xlarge",
            REGION,
            "us-east-1b",
            bootstrap_command=AGENT,
            env={"SPOTHOP_AGENT_TOKEN": "per-instance", "SPOTHOP_CONTROL_PLANE": "https://cp"},
            tags=job | {"spothop-node": "n-0"},
        )
    )
    on_demand = provider.launch(
        LaunchRequest(
            "g5.xlarge",
            REGION,
            "us-east-1a",
            spot=False,
            bootstrap_command=AGENT,
            tags=job | {"spothop-token": "tok-od"},
        )
    )
    assert spot.spot and not on_demand.spot and spot.zone == "us-east-1b"
    raw = provider.client(REGION).describe_instance_attribute(
        InstanceId=spot.instance_id, Attribute="userData"
    )
    script = base64.b64decode(raw["UserData"]["Value"]).decode()
    assert "SPOTHOP_AGENT_TOKEN=per-instance" in script and FAKE_SECRET not in script

    fleet = provider.launch_fleet(
        FleetRequest(
            template=LaunchRequest(
                "g5.xlarge",
                REGION,
                "us-east-1a",
                bootstrap_command=AGENT,
                tags={"spothop-job": "j-server", "spothop-node": "w"},
            ),
            count=4,
            alternatives=[("g5.2xlarge", None)],
        )
    )
    assert len(fleet.instances) == 4
    mine = provider.find_instances({"spothop-job": "j-server"})  # 6 instances, pages of 5
    assert len(mine) == 6 and len({i.instance_id for i in mine}) == 6
    assert (
        len([p for name, p in market.calls if name == "DescribeInstances" and "Filters" in p]) >= 2
    )

    prices = provider.spot_prices(["g5.xlarge"])
    assert {p.zone for p in prices} >= {"us-east-1a", "us-east-1b"}
    assert all(p.price_usd_per_hour == 0.45 for p in prices)

    market.no_capacity.add(("g5.xlarge", "us-east-1c"))
    with pytest.raises(CapacityUnavailable) as info:
        provider.launch(LaunchRequest("g5.xlarge", REGION, "us-east-1c", bootstrap_command=AGENT))
    assert info.value.code == "InsufficientInstanceCapacity"

    clock.advance(1800)
    provider.terminate(spot.instance_id)
    provider.terminate(spot.instance_id)
    ended = provider.describe(spot.instance_id)
    clock.advance(1800)
    later = provider.describe(spot.instance_id)
    assert ended.state is InstanceState.TERMINATED and later.cost_microusd == ended.cost_microusd
    assert ended.cost_microusd == pytest.approx(0.45 * ended.billed_seconds / 3600 * 1e6, abs=1)
    assert ended.billed_seconds >= 1800
    for instance in mine:
        provider.terminate(instance.instance_id)
    assert not [i for i in provider.find_instances({"spothop-job": "j-server"}) if i.state.is_alive]
