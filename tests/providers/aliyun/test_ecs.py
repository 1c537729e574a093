"""The ECS provider against its fake RPC API: what the conformance suite does not ask."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("alibabacloud_ecs20140526")

from spothop.errors import AuthFailed, CapacityUnavailable, ConfigError, RateLimited
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.registry import get_provider
from spothop.resources.currency import load_rates
from tests.providers.aliyun.fake_ecs import (
    FakeEcs,
    ShiftedClock,
    fake_credentials,
    make_provider,
    serve,
)

SPOT_TYPE = "ecs.gn7i-c8g1.2xlarge"


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeEcs, Any]]:
    fake_credentials(monkeypatch)
    fake = FakeEcs(ShiftedClock())
    with serve(fake) as url:
        yield fake, make_provider(fake, url)


def _request(**fields: Any) -> LaunchRequest:
    return LaunchRequest(
        instance_type=fields.pop("instance_type", SPOT_TYPE),
        region="cn-hangzhou",
        zone=fields.pop("zone", "cn-hangzhou-i"),
        bootstrap_command=["python", "-m", "spothop.agent", "run", "--", "true"],
        **fields,
    )


def _run_query(fake: FakeEcs) -> dict[str, str]:
    [query] = [q for action, q in fake.calls if action == "RunInstances"]
    return query


def test_prices_are_quoted_in_cny_and_normalised_to_usd(cloud: Any) -> None:
    _, provider = cloud
    cny = load_rates().usd_per_unit["CNY"]
    [offering] = [
        o
        for o in provider.list_offerings()
        if (o.instance_type, o.zone) == (SPOT_TYPE, "cn-hangzhou-i")
    ]
    assert (offering.currency, offering.spot_price_original, offering.on_demand_price_original) == (
        "CNY",
        2.752,
        14.86,
    )
    assert offering.spot_price_usd_per_hour == pytest.approx(2.752 * cny)
    assert offering.on_demand_price_usd_per_hour == pytest.approx(14.86 * cny)
    assert offering.gpu == "A10"
    assert any("ecs.g7.large" in note for note in provider.offering_notes())  # no GPU row: left out


def test_a_spot_launch_asks_for_spot_with_its_protection_period_and_tags(cloud: Any) -> None:
    fake, provider = cloud
    instance = provider.launch(
        _request(tags={"spothop-job": "Job_42"}, env={"SPOTHOP_AGENT_TOKEN": "t"})
    )
    query = _run_query(fake)
    assert query["SpotStrategy"] == "SpotAsPriceGo" and query["SpotDuration"] == "1"
    assert (
        query["SpotInterruptionBehavior"] == "Terminate"
        and query["InstanceChargeType"] == "PostPaid"
    )
    assert "SPOTHOP_AGENT_TOKEN=t" in base64.b64decode(query["UserData"]).decode()
    assert instance.tags["spothop-job"] == "Job_42" and instance.spot
    assert [i.instance_id for i in provider.find_instances({"spothop-job": "Job_42"})] == [
        instance.instance_id
    ]


def test_a_price_limit_is_sent_in_the_regions_currency(cloud: Any) -> None:
    fake, provider = cloud
    cny = load_rates().usd_per_unit["CNY"]
    provider.launch(_request(max_price_usd_per_hour=1.0))
    query = _run_query(fake)
    assert query["SpotStrategy"] == "SpotWithPriceLimit"
    assert float(query["SpotPriceLimit"]) == pytest.approx(1.0 / cny, rel=1e-3)


def test_no_stock_keeps_the_clouds_code_and_throttling_is_retried(cloud: Any) -> None:
    fake, provider = cloud
    fake.sold_out.add(("cn-hangzhou-i", SPOT_TYPE))
    with pytest.raises(CapacityUnavailable) as info:
        provider.launch(_request())
    assert info.value.code == "OperationDenied.NoStock"
    assert [
        p.available for p in provider.spot_prices([SPOT_TYPE]) if p.zone == "cn-hangzhou-i"
    ] == [False]
    fake.sold_out.clear()
    fake.fail_next(
        "RunInstances", "Throttling.User", "Request was denied due to user flow control.", times=2
    )
    assert provider.launch(_request()).state is InstanceState.PENDING
    fake.fail_next("RunInstances", "Throttling.User", times=5)
    with pytest.raises(RateLimited):
        provider.launch(_request())
    fake.fail_next(
        "RunInstances",
        "InvalidAccessKeyId.NotFound",
        "Specified access key is not found.",
        status=404,
    )
    with pytest.raises(AuthFailed, match="access key"):
        provider.launch(_request())


def test_a_reclaimed_spot_instance_reads_noticed_then_preempted(cloud: Any) -> None:
    fake, provider = cloud
    instance = provider.launch(_request())
    fake.clock.advance(10)
    fake.reclaim(instance.instance_id)
    noticed = provider.describe(instance.instance_id)
    assert noticed.state is InstanceState.NOTICED and noticed.termination_time is not None
    fake.release(instance.instance_id)
    assert provider.describe(instance.instance_id).state is InstanceState.PREEMPTED


def test_listing_follows_next_token_pages(cloud: Any) -> None:
    fake, provider = cloud
    fake.page_size = 2
    launched = {provider.launch(_request(spot=False)).instance_id for _ in range(5)}
    assert {i.instance_id for i in provider.list_instances()} == launched


def test_bad_options_and_missing_credentials_say_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The credentials library reads the environment once, at import: ask a fresh process.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALIBABA_CLOUD_", "ALICLOUD_"))}
    env |= {"HOME": str(tmp_path), "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true"}
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("spothop")),
            "catalog",
            "refresh",
            "--provider",
            "aliyun",
            "--dry-run",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    said = done.stdout + done.stderr
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in said and ".alibabacloud/credentials" in said, said
    fake_credentials(monkeypatch)
    with pytest.raises(ConfigError, match="spot_duration_hours"):
        get_provider("aliyun", spot_duration_hours=3)


def test_catalog_refresh_from_the_cli_on_the_fake(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from spothop.cli.main import app

    fake_credentials(monkeypatch)
    fake = FakeEcs(ShiftedClock())
    with serve(fake) as url:
        monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("SPOTHOP_ALIYUN_ENDPOINT_URL", url)
        monkeypatch.setenv("SPOTHOP_ALIYUN_REGIONS", "cn-hangzhou")
        result = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "aliyun", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["regions"] == ["cn-hangzhou"] and answer["live_offerings"] == 3
    saved = (tmp_path / "home" / "catalog" / "aliyun.csv").read_text()
    assert "CNY,14.86,2.752" in saved


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_credentials(monkeypatch)
    monkeypatch.setitem(sys.modules, "alibabacloud_ecs20140526.client", None)
    with pytest.raises(ConfigError, match=r"pip install 'spothop\[aliyun\]'"):
        get_provider("aliyun")


def test_the_system_disk_takes_the_jobs_size_tier_and_image(cloud: Any) -> None:
    from spothop.providers.base import DiskSpec, DiskTier

    fake, provider = cloud
    provider.launch(_request(disk=DiskSpec(200, DiskTier.MEDIUM), image_id="m-bp1job0image"))
    query = _run_query(fake)
    assert query["SystemDisk.Size"] == "200"
    assert query["SystemDisk.Category"] == "cloud_essd"
    assert query["SystemDisk.PerformanceLevel"] == "PL0"
    assert query["ImageId"] == "m-bp1job0image" and "ImageFamily" not in query


def test_without_a_disk_the_system_disk_is_the_clouds_default(cloud: Any) -> None:
    fake, provider = cloud
    provider.launch(_request())
    assert not [k for k in _run_query(fake) if k.startswith("SystemDisk")]


def test_the_console_is_get_instance_console_output_decoded(cloud: Any) -> None:
    """A lost agent's boot log comes from ``GetInstanceConsoleOutput``, its Base64 decoded; an
    unknown id is InstanceNotFound; an instance spothop deleted shows an empty console."""
    from spothop.errors import InstanceNotFound
    from spothop.providers.extensions import ConsoleOutput

    fake, provider = cloud
    assert isinstance(provider, ConsoleOutput)
    instance = provider.launch(_request())
    assert provider.console_output(instance.instance_id) == ""
    fake.consoles[instance.instance_id] = (
        "cloud-init: pip install spothop\n环境: curl: (7) failed\n"
    )
    text = provider.console_output(instance.instance_id)
    assert text.splitlines()[-1] == "环境: curl: (7) failed"
    (query,) = [q for action, q in fake.calls if action == "GetInstanceConsoleOutput"][-1:]
    assert query["InstanceId"] == instance.instance_id and query["RemoveSymbols"] == "true"
    with pytest.raises(InstanceNotFound):
        provider.console_output("i-doesnotexist")
    provider.terminate(instance.instance_id)
    assert provider.console_output(instance.instance_id) == ""
