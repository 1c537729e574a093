"""The Compute Engine provider against its fake REST API: what the conformance suite does not ask."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.cloud.compute_v1")

from spothop.errors import AuthFailed, ConfigError, QuotaExceeded, RateLimited
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.gcp import offerings as parse
from spothop.providers.registry import get_provider
from tests.providers.gcp.fake_compute import FakeCompute, ShiftedClock, make_provider, serve


@pytest.fixture
def cloud() -> Iterator[tuple[FakeCompute, Any]]:
    fake = FakeCompute("proj-1", ShiftedClock())
    with serve(fake) as url:
        yield fake, make_provider(fake, url)


def _request(instance_type: str = "g2-standard-4", **fields: Any) -> LaunchRequest:
    return LaunchRequest(
        instance_type=instance_type,
        region="us-central1",
        zone=fields.pop("zone", "us-central1-a"),
        bootstrap_command=["python", "-m", "spothop.agent", "run", "--", "true"],
        **fields,
    )


def test_a_spot_launch_asks_for_spot_with_delete_labels_and_no_credential(cloud: Any) -> None:
    fake, provider = cloud
    instance = provider.launch(
        _request(
            tags={"spothop-job": "Job_42", "spothop-node": "Node-0"},
            env={"SPOTHOP_AGENT_TOKEN": "t"},
        )
    )
    [(_, _, body)] = [c for c in fake.calls if c[0] == "instances.insert"]
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["labels"]["spothop-job"] == "job_42" and body["labels"]["spothop-node"] == "node-0"
    items = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert "SPOTHOP_AGENT_TOKEN=t" in items["startup-script"]
    assert instance.tags["spothop-job"] == "Job_42"  # the tags as given, from metadata
    assert [i.instance_id for i in provider.find_instances({"spothop-job": "Job_42"})] == [
        instance.instance_id
    ]
    assert provider.find_instances({"spothop-job": "other"}) == []


def test_an_n1_type_attaches_its_gpus_and_an_on_demand_launch_is_standard(cloud: Any) -> None:
    fake, provider = cloud
    instance = provider.launch(_request("n1-standard-8+1xnvidia-tesla-t4", spot=False))
    [(_, _, body)] = [c for c in fake.calls if c[0] == "instances.insert"]
    assert body["machineType"].endswith("/machineTypes/n1-standard-8")
    assert body["guestAccelerators"] == [
        {
            "acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 1,
        }
    ]
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert (instance.instance_type, instance.spot) == ("n1-standard-8+1xnvidia-tesla-t4", False)


def test_offerings_are_what_the_zones_sell_with_catalog_prices_and_a_note(cloud: Any) -> None:
    _, provider = cloud
    offerings = provider.list_offerings()
    sold = {(o.instance_type, o.zone) for o in offerings}
    assert ("g2-standard-4", "us-central1-b") in sold and (
        "n1-standard-8+1xnvidia-tesla-v100",
        "us-central1-a",
    ) in sold
    assert not any(o.instance_type.startswith("a3-") for o in offerings)  # the zones do not sell A3
    assert all(o.region == "us-central1" and o.on_demand_price_usd_per_hour for o in offerings)
    assert any("built-in catalog" in note for note in provider.offering_notes())


def test_quota_and_capacity_from_the_operation_keep_the_clouds_code(cloud: Any) -> None:
    fake, provider = cloud
    fake.operation_errors.append(
        ("QUOTA_EXCEEDED", "Quota 'NVIDIA_L4_GPUS' exceeded. Limit: 0.0 in region us-central1.")
    )
    with pytest.raises(QuotaExceeded, match="NVIDIA_L4_GPUS") as info:
        provider.launch(_request())
    assert info.value.code == "QUOTA_EXCEEDED" and provider.list_instances() == []


def test_a_throttled_call_is_retried_then_rate_limited(cloud: Any) -> None:
    fake, provider = cloud
    fake.fail_next("instances.insert", 403, "rateLimitExceeded", times=2)
    assert provider.launch(_request()).state is InstanceState.PENDING
    fake.fail_next("instances.insert", 403, "rateLimitExceeded", times=5)
    with pytest.raises(RateLimited) as info:
        provider.launch(_request())
    assert info.value.code == "rateLimitExceeded"
    fake.fail_next(
        "instances.insert", 403, "forbidden", "Required 'compute.instances.create' permission"
    )
    with pytest.raises(AuthFailed, match=r"compute\.instances\.create"):
        provider.launch(_request())


def test_a_preempted_vm_reads_preempted_then_is_gone(cloud: Any) -> None:
    fake, provider = cloud
    instance = provider.launch(_request())
    fake.preempt(instance.name)
    assert provider.describe(instance.instance_id).state is InstanceState.PREEMPTED
    fake.vanish(instance.name)
    with pytest.raises(Exception, match="was not found"):
        provider.describe(instance.instance_id)


def test_labels_and_names_follow_compute_engines_rules() -> None:
    assert parse.label_value("Job_42.X") == "job_42-x" and parse.label_key("9lives") == "k9lives"
    name = parse.resource_name("My Job/7", "ab12")
    assert name == "my-job-7-ab12"
    with pytest.raises(ConfigError, match="n1-standard-8\\+1xnvidia-tesla-t4"):
        parse.machine_shape("n1-standard-8+tesla")


def test_missing_credentials_say_where_adc_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "nope.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    with pytest.raises(AuthFailed, match="GOOGLE_APPLICATION_CREDENTIALS") as info:
        get_provider("gcp", project="p")
    assert "application_default_credentials.json" in str(info.value)


def test_catalog_refresh_from_the_cli_on_the_fake(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`spothop catalog refresh --provider gcp`: ADC from a key file whose token URI is the fake's."""
    from typer.testing import CliRunner

    from spothop.cli.main import app

    fake = FakeCompute("proj-1", ShiftedClock())
    with serve(fake) as url:
        key = tmp_path / "adc.json"
        key.write_text(json.dumps(_service_account_file(f"{url}/token")))
        monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
        monkeypatch.setenv("SPOTHOP_GCP_PROJECT", "proj-1")
        monkeypatch.setenv("SPOTHOP_GCP_ENDPOINT_URL", url)
        monkeypatch.setenv("SPOTHOP_GCP_REGIONS", "us-central1")
        result = CliRunner().invoke(app, ["catalog", "refresh", "--provider", "gcp", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["regions"] == ["us-central1"] and answer["live_offerings"] > 0
    assert (tmp_path / "home" / "catalog" / "gcp.csv").exists()


def _service_account_file(token_uri: str) -> dict[str, str]:
    """A service-account key file (a fresh RSA key, no real account) whose tokens come from the fake."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "proj-1",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "spothop-test@proj-1.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }


def test_an_unknown_region_names_the_known_ones_and_a_missing_sdk_names_the_extra(
    cloud: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, _ = cloud
    with serve(fake) as url:
        provider = make_provider(fake, url, regions=["us-centrall"])
        with pytest.raises(ConfigError, match=r"us-centrall.*known: europe-west4, us-central1"):
            provider.list_offerings()
    monkeypatch.setitem(sys.modules, "google.cloud.compute_v1", None)
    with pytest.raises(ConfigError, match=r"pip install 'spothop\[gcp\]'"):
        get_provider("gcp", project="p")


def test_the_boot_disk_takes_the_jobs_size_tier_and_image(cloud: Any) -> None:
    from spothop.providers.base import DiskSpec, DiskTier

    fake, provider = cloud
    image = "projects/my-proj/global/images/my-cuda-image"
    provider.launch(_request(disk=DiskSpec(512, DiskTier.HIGH), image_id=image))
    provider.launch(_request())
    with_disk, plain = [body for call, _, body in fake.calls if call == "instances.insert"]
    params = with_disk["disks"][0]["initializeParams"]
    assert params["diskSizeGb"] == "512"
    assert params["diskType"] == "zones/us-central1-a/diskTypes/pd-ssd"
    assert params["sourceImage"] == image
    default = plain["disks"][0]["initializeParams"]
    assert default["diskSizeGb"] == "100" and "diskType" not in default
    assert default["sourceImage"] == provider.image


def test_the_console_is_serial_port_1_as_the_cloud_shows_it(cloud: Any) -> None:
    """A lost agent's boot log comes from ``instances.getSerialPortOutput``: the startup script's
    lines; an unknown id is InstanceNotFound; a VM spothop deleted shows an empty console."""
    from spothop.errors import InstanceNotFound
    from spothop.providers.extensions import ConsoleOutput

    fake, provider = cloud
    assert isinstance(provider, ConsoleOutput)
    instance = provider.launch(_request())
    assert provider.console_output(instance.instance_id) == ""  # not booted yet: nothing written
    (name,) = fake.instances
    fake.write_console(name, "startup-script: pip install spothop\n")
    fake.write_console(name, "startup-script: curl: (7) Failed to connect to 10.0.0.2\n")
    text = provider.console_output(instance.instance_id)
    assert text.splitlines()[-1] == "startup-script: curl: (7) Failed to connect to 10.0.0.2"
    [(_, path, _)] = [c for c in fake.calls if c[0] == "instances.getSerialPortOutput"][-1:]
    assert path.endswith(f"/instances/{name}/serialPort")
    with pytest.raises(InstanceNotFound):
        provider.console_output("4999999999999999999")
    provider.terminate(instance.instance_id)
    assert provider.console_output(instance.instance_id) == ""


def test_an_image_that_does_not_exist_is_a_refused_launch_naming_the_option(cloud: Any) -> None:
    """Compute Engine answers an insert naming a missing image with 404 notFound: that is the
    launch's image (every launch would name it again), never an instance gone."""
    from spothop.errors import InstanceNotFound, InvalidRequest

    fake, provider = cloud
    missing = "The resource 'projects/p/global/images/family/no-such-family' was not found"
    fake.fail_next("instances.insert", 404, "notFound", missing)
    with pytest.raises(InvalidRequest) as info:
        provider.launch(_request())
    assert not isinstance(info.value, InstanceNotFound)
    assert "no-such-family" in str(info.value) and "SPOTHOP_GCP_IMAGE" in str(info.value)
    assert provider.list_instances() == []
