"""The EC2 provider on moto (in-process): launches, tags, fleets, prices, paging, errors, credentials.

What moto lacks (a market: prices, capacity, bids, unknown types; scripted
failures) comes from :class:`tests.providers.aws.moto_cloud.Ec2Market`; paging
past 1,000 rows, which moto would take minutes to build, is served by
botocore's Stubber with EC2's own page shapes.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import ANY, Stubber

from spothop.errors import (
    AuthFailed,
    CapacityUnavailable,
    ConfigError,
    InvalidRequest,
    PriceTooLow,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)
from spothop.providers.aws import AwsProvider
from spothop.providers.aws.errors import RETRY_ATTEMPTS
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.extensions import FleetLauncher, FleetRequest, OfferingNotes
from spothop.providers.registry import get_provider, provider_names
from tests.providers.aws.moto_cloud import (
    FAKE_KEY_ID,
    FAKE_SECRET,
    IMAGE_ID,
    REGION,
    Ec2Market,
    ShiftedClock,
    fake_credentials,
    in_process,
    make_provider,
)

AGENT = ["python", "-m", "spothop.agent", "run", "--", "python", "train.py"]
ENV = {
    "SPOTHOP_AGENT_TOKEN": "agent-token-7f3a",
    "SPOTHOP_CONTROL_PLANE": "https://cp.example:8443",
}


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[AwsProvider, Ec2Market]]:
    fake_credentials(monkeypatch, tmp_path)
    with in_process():
        yield make_provider()


def request(**fields: Any) -> LaunchRequest:
    base: dict[str, Any] = {
        "instance_type": "g5.xlarge",
        "region": REGION,
        "zone": "us-east-1a",
        "bootstrap_command": AGENT,
        "env": ENV,
        "tags": {"spothop-job": "j-a1b2c3", "spothop-node": "node-0", "spothop-token": "tok-1"},
    }
    return LaunchRequest(**(base | fields))


def calls(market: Ec2Market, operation: str) -> list[dict[str, Any]]:
    return [params for name, params in market.calls if name == operation]


def user_data(provider: AwsProvider, instance_id: str) -> str:
    answer = provider.client(REGION).describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )
    return base64.b64decode(answer["UserData"]["Value"]).decode()


# -- launching -------------------------------------------------------------------


def test_a_spot_launch_is_one_time_terminate_tagged_and_boots_the_agent_without_credentials(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    instance = provider.launch(request())
    (sent,) = calls(market, "RunInstances")
    assert sent["InstanceMarketOptions"] == {
        "MarketType": "spot",
        "SpotOptions": {
            "SpotInstanceType": "one-time",
            "InstanceInterruptionBehavior": "terminate",
        },
    }
    assert sent["ClientToken"] == "tok-1" and sent["MetadataOptions"]["HttpTokens"] == "required"
    assert (instance.spot, instance.zone, instance.price_usd_per_hour) == (True, "us-east-1a", 0.45)
    assert {k: instance.tags[k] for k in ("spothop-job", "spothop-node", "spothop-token")} == {
        "spothop-job": "j-a1b2c3",
        "spothop-node": "node-0",
        "spothop-token": "tok-1",
    }
    script = user_data(provider, instance.instance_id)
    assert "SPOTHOP_AGENT_TOKEN=agent-token-7f3a" in script
    assert "SPOTHOP_CONTROL_PLANE=https://cp.example:8443" in script
    assert "exec python -m spothop.agent run -- python train.py" in script
    assert "SPOTHOP_METADATA_PROTOCOL=aws" in script
    for secret in (FAKE_KEY_ID, FAKE_SECRET, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert secret not in script


def test_an_on_demand_launch_has_no_market_options_and_the_list_price(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    instance = provider.launch(request(spot=False, zone=None, tags={}))
    (sent,) = calls(market, "RunInstances")
    assert "InstanceMarketOptions" not in sent and "Placement" not in sent
    assert not instance.spot and instance.price_usd_per_hour == pytest.approx(1.006)
    assert instance.tags["spothop-token"].startswith("sh-")  # made when the caller gave none
    assert instance.tags["spothop-price-usd-per-hour"] == "1.006"


@pytest.mark.parametrize(
    "env",
    [
        {"AWS_SECRET_ACCESS_KEY": "x"},
        {"AWS_SESSION_TOKEN": "x"},
        {"MY_KEY": "AKIAABCDEFGHIJKLMNOP"},
    ],
)
def test_a_cloud_credential_for_the_instance_is_refused_before_any_call(
    ec2: tuple[AwsProvider, Ec2Market], env: dict[str, str]
) -> None:
    provider, market = ec2
    with pytest.raises(ConfigError, match="instance profile") as info:
        provider.launch(request(env=env))
    assert "AKIAABCDEFGHIJKLMNOP" not in str(info.value)
    assert not calls(market, "RunInstances")


def test_credentials_are_never_logged(
    ec2: tuple[AwsProvider, Ec2Market], caplog: pytest.LogCaptureFixture
) -> None:
    provider, _ = ec2
    with caplog.at_level(logging.DEBUG):
        instance = provider.launch(request())
        provider.list_instances()
        provider.terminate(instance.instance_id)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("spothop")]
    assert not [m for m in ours if FAKE_SECRET in m or FAKE_KEY_ID in m]
    assert not [r for r in caplog.records if FAKE_SECRET in r.getMessage()]


# -- describing, listing by tag, ending --------------------------------------------


def test_list_by_tag_sees_only_spothop_instances_and_terminate_is_idempotent(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, _ = ec2
    first = provider.launch(request())
    second = provider.launch(request(tags={"spothop-job": "j-other", "spothop-token": "tok-2"}))
    provider.client(REGION).run_instances(  # not spothop's: no launch token
        ImageId=IMAGE_ID, MinCount=1, MaxCount=1, InstanceType="t3.micro"
    )
    assert {i.instance_id for i in provider.list_instances()} == {
        first.instance_id,
        second.instance_id,
    }
    assert [i.instance_id for i in provider.find_instances({"spothop-job": "j-other"})] == [
        second.instance_id
    ]
    provider.terminate(first.instance_id)
    provider.terminate(first.instance_id)
    provider.terminate("i-0123456789abcdef0")
    assert provider.describe(first.instance_id).state is InstanceState.TERMINATED
    assert provider.describe(second.instance_id).state is InstanceState.RUNNING


def test_an_instance_the_cloud_took_back_reads_preempted_and_stops_costing_then(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, _ = ec2
    launched = dt.datetime(2026, 1, 5, 18, 0, 0, tzinfo=dt.UTC)
    raw = {
        "InstanceId": "i-0abc",
        "InstanceType": "g5.xlarge",
        "InstanceLifecycle": "spot",
        "State": {"Name": "terminated"},
        "StateReason": {"Code": "Server.SpotInstanceTermination"},
        "StateTransitionReason": "Service initiated (2026-01-05 19:00:00 GMT)",
        "Placement": {"AvailabilityZone": "us-east-1a"},
        "LaunchTime": launched,
        "Tags": [{"Key": "spothop-price-usd-per-hour", "Value": "0.36"}],
    }
    instance = provider._instance(raw, REGION)
    assert instance.state is InstanceState.PREEMPTED
    assert (instance.billed_seconds, instance.cost_microusd) == (3600.0, 360_000)


def test_a_spot_request_marked_for_termination_reads_noticed_with_its_deadline(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    instance = provider.launch(request())
    other = provider.launch(request(tags={"spothop-token": "tok-2"}))
    at = float(int(provider.clock.now()))
    market.interrupt(instance.instance_id, at)
    noticed = provider.describe(instance.instance_id)
    assert noticed.state is InstanceState.NOTICED
    assert (noticed.notice_time, noticed.termination_time) == (at, at + 120)
    listed = {i.instance_id: i.state for i in provider.list_instances()}
    assert listed == {
        instance.instance_id: InstanceState.NOTICED,
        other.instance_id: InstanceState.RUNNING,
    }


def test_paging_follows_next_token_on_moto(ec2: tuple[AwsProvider, Ec2Market]) -> None:
    provider, market = ec2
    provider.page_size = 5
    for _ in range(12):  # moto pages reservations: one launch call each
        provider.client(REGION).run_instances(
            ImageId=IMAGE_ID,
            MinCount=1,
            MaxCount=1,
            InstanceType="g5.xlarge",
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": "spothop-token", "Value": "many"}]}
            ],
        )
    assert len(provider.find_instances({"spothop-token": "many"})) == 12
    pages = calls(market, "DescribeInstances")
    assert len(pages) >= 3 and all(p["MaxResults"] == 5 for p in pages)
    assert sum("NextToken" in p for p in pages) == len(pages) - 1


def _stubbed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AwsProvider:
    fake_credentials(monkeypatch, tmp_path)
    return AwsProvider(
        regions=[REGION], image_id=IMAGE_ID, clock=ShiftedClock(), placement_scores=False
    )


def test_spot_prices_and_instances_page_past_a_thousand_rows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    provider = _stubbed(monkeypatch, tmp_path)
    stub = Stubber(provider.client(REGION))
    stamp = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    rows = [
        {
            "AvailabilityZone": f"us-east-1{'abcdef'[n % 6]}",
            "InstanceType": f"g{n // 6}.xlarge",
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": "0.5",
            "Timestamp": stamp,
        }
        for n in range(2500)
    ]
    for start, token in ((0, "p2"), (1000, "p3"), (2000, None)):
        page: dict[str, Any] = {"SpotPriceHistory": rows[start : start + 1000]}
        if token:
            page["NextToken"] = token
        expected = {
            "InstanceTypes": ANY,
            "ProductDescriptions": ["Linux/UNIX"],
            "StartTime": ANY,
            "MaxResults": 1000,
        }
        if start:
            expected["NextToken"] = ANY
        stub.add_response("describe_spot_price_history", page, expected)
    instances = [_raw(n) for n in range(1200)]
    stub.add_response(
        "describe_instances",
        {"Reservations": [{"Instances": instances[:1000]}], "NextToken": "more"},
        {"Filters": ANY, "MaxResults": 1000},
    )
    stub.add_response(
        "describe_instances",
        {"Reservations": [{"Instances": instances[1000:]}]},
        {"Filters": ANY, "MaxResults": 1000, "NextToken": "more"},
    )
    with stub:
        prices = provider.spot_prices([f"g{n}.xlarge" for n in range(420)])
        listed = provider.list_instances()
    stub.assert_no_pending_responses()
    assert len(prices) == 2500 and len({(p.zone, p.instance_type) for p in prices}) == 2500
    assert len(listed) == 1200 and len({i.instance_id for i in listed}) == 1200


def _raw(n: int) -> dict[str, Any]:
    return {
        "InstanceId": f"i-0{n:016x}",
        "InstanceType": "g5.xlarge",
        "State": {"Name": "running", "Code": 16},
        "Placement": {"AvailabilityZone": "us-east-1a"},
        "LaunchTime": dt.datetime(2026, 11, 30, tzinfo=dt.UTC),
        "Tags": [
            {"Key": "spothop-token", "Value": f"t{n}"},
            {"Key": "spothop-price-usd-per-hour", "Value": "1.0"},
        ],
    }


# -- errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", CapacityUnavailable),
        ("MaxSpotInstanceCountExceeded", QuotaExceeded),
        ("InstanceLimitExceeded", QuotaExceeded),
        ("VcpuLimitExceeded", QuotaExceeded),
        ("SpotMaxPriceTooLow", PriceTooLow),
        ("UnauthorizedOperation", AuthFailed),
        ("OptInRequired", AuthFailed),
        ("InvalidParameterValue", InvalidRequest),
        ("SomethingNew", ProviderError),
    ],
)
def test_launch_errors_keep_the_clouds_code_and_leave_nothing(
    ec2: tuple[AwsProvider, Ec2Market], code: str, kind: type[ProviderError]
) -> None:
    provider, market = ec2
    market.fail_next("RunInstances", code, f"EC2 says {code}")
    with pytest.raises(kind) as info:
        provider.launch(request())
    assert type(info.value) is kind or kind is ProviderError
    assert (info.value.provider, info.value.code, info.value.cloud_message) == (
        "aws",
        code,
        f"EC2 says {code}",
    )
    assert provider.list_instances() == []


def test_throttling_is_retried_with_jittered_backoff_then_succeeds(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    instance = provider.launch(request())
    market.fail_next("DescribeInstances", "RequestLimitExceeded", times=2)
    assert provider.describe(instance.instance_id).instance_id == instance.instance_id
    slept = provider.clock.slept  # type: ignore[attr-defined]
    assert len(slept) == 2 and 0 <= slept[0] <= 0.5 and 0 <= slept[1] <= 1.0


def test_throttling_that_persists_is_rate_limited_after_a_bounded_number_of_calls(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    market.fail_next("RunInstances", "RequestLimitExceeded", times=RETRY_ATTEMPTS + 3)
    with pytest.raises(RateLimited) as info:
        provider.launch(request())
    assert info.value.code == "RequestLimitExceeded" and info.value.exit_code == 4
    assert len(provider.clock.slept) == RETRY_ATTEMPTS - 1  # type: ignore[attr-defined]
    assert len([f for f in market.failures if f[0] == "RunInstances"]) == 3  # not called again


# -- fleets ------------------------------------------------------------------------


def test_an_instant_fleet_starts_every_worker_price_capacity_optimized(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    assert isinstance(provider, FleetLauncher)
    fleet = FleetRequest(
        template=request(tags={"spothop-job": "j-fleet", "spothop-node": "w"}),
        count=3,
        alternatives=[("g5.2xlarge", "us-east-1b"), ("g5.xlarge", "us-east-1a")],
    )
    result = provider.launch_fleet(fleet)
    (sent,) = calls(market, "CreateFleet")
    assert sent["Type"] == "instant"
    assert sent["SpotOptions"]["AllocationStrategy"] == "price-capacity-optimized"
    assert sent["TargetCapacitySpecification"]["TotalTargetCapacity"] == 3
    assert [o["InstanceType"] for o in sent["LaunchTemplateConfigs"][0]["Overrides"]] == [
        "g5.xlarge",
        "g5.2xlarge",
    ]
    assert len(result.instances) == 3 and not result.refused
    assert sorted(i.tags["spothop-node"] for i in result.instances) == ["w-0", "w-1", "w-2"]
    assert {i.tags["spothop-job"] for i in provider.find_instances()} == {"j-fleet"}
    assert all(i.spot and i.price_usd_per_hour == 0.45 for i in result.instances)
    templates = provider.client(REGION).describe_launch_templates()["LaunchTemplates"]
    assert templates == []  # the call's template is gone again


def test_a_fleet_the_cloud_cannot_fill_raises_its_code_and_leaves_nothing(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    market.fail_next("CreateFleet", "InsufficientInstanceCapacity", "no capacity anywhere")
    with pytest.raises(CapacityUnavailable, match="no capacity anywhere"):
        provider.launch_fleet(FleetRequest(template=request(), count=2))
    assert provider.list_instances() == []
    assert provider.client(REGION).describe_launch_templates()["LaunchTemplates"] == []


# -- offerings and prices ----------------------------------------------------------


def test_offerings_come_from_the_api_and_say_where_on_demand_prices_came_from(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, _ = ec2
    offerings = {(o.instance_type, o.zone): o for o in provider.list_offerings()}
    g5 = offerings[("g5.xlarge", "us-east-1a")]
    assert (g5.gpu, g5.gpu_count, g5.vcpus, g5.memory_gib) == ("A10G", 1, 4.0, 16.0)
    assert g5.on_demand_price_usd_per_hour == pytest.approx(1.006)  # the built-in catalog's
    assert g5.spot_price_usd_per_hour == 0.45
    assert isinstance(provider, OfferingNotes)
    (note,) = [n for n in provider.offering_notes() if "on-demand" in n]
    assert "Pricing API could not be reached" in note and "built-in catalog" in note


def test_the_pricing_api_gives_on_demand_prices_when_it_answers(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, _ = ec2
    item = (
        '{"product": {"attributes": {"instanceType": "g5.xlarge"}}, "terms": {"OnDemand": {"X": '
        '{"priceDimensions": {"Y": {"unit": "Hrs", "pricePerUnit": {"USD": "1.2120000000"}}}}}}}'
    )
    pricing = provider.client("us-east-1", "pricing")
    with Stubber(pricing) as stub:
        stub.add_response("get_products", {"PriceList": [item], "FormatVersion": "aws_v1"})
        offerings = provider.list_offerings()
    g5 = next(o for o in offerings if o.instance_type == "g5.xlarge")
    assert g5.on_demand_price_usd_per_hour == 1.212
    assert not [n for n in provider.offering_notes() if "on-demand" in n]


def test_placement_scores_mark_unlikely_markets_unavailable_and_degrade_without_the_api(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    market.prices["g4dn.xlarge"] = 0.2
    market.scores = {"g5.xlarge": 8, "g4dn.xlarge": 1}
    available = {
        (p.instance_type, p.zone): p.available
        for p in provider.spot_prices(["g5.xlarge", "g4dn.xlarge"])
    }
    assert available[("g5.xlarge", "us-east-1a")] and not available[("g4dn.xlarge", "us-east-1a")]
    market.scores = None  # moto's own answer: the API is not implemented
    assert all(p.available for p in provider.spot_prices(["g4dn.xlarge"]))
    assert any("GetSpotPlacementScores" in n for n in provider.offering_notes())


# -- configuration ----------------------------------------------------------------


def test_the_registry_finds_the_adapter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_credentials(monkeypatch, tmp_path)
    assert "aws" in provider_names()
    provider = get_provider("aws", regions="us-west-2,us-east-1", world_path=None)
    assert isinstance(provider, AwsProvider) and provider.regions == ["us-west-2", "us-east-1"]
    assert provider.capabilities.notice_protocol == "aws"


def test_missing_credentials_say_what_was_looked_for_and_where(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(AuthFailed) as info:
        get_provider("aws")
    message = str(info.value)
    assert info.value.code == "NoCredentials" and info.value.exit_code == 2
    for where in ("AWS_ACCESS_KEY_ID", str(tmp_path / "no-aws-credentials"), "instance metadata"):
        assert where in message


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ConfigError, match=r"pip install 'spothop\[aws\]'"):
        get_provider("aws")


def test_a_region_ec2_does_not_have_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_credentials(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="no region 'us-middle-9'"):
        get_provider("aws", regions=["us-middle-9"])
