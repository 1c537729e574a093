"""A job's root volume and machine image on EC2 (moto): the AMI's root device sized and typed
by the request's ``disk``, the request's ``image_id`` booted over the configured image."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import ProviderError
from spothop.providers.aws import AwsProvider
from spothop.providers.aws.launch import ebs_volume
from spothop.providers.base import DiskSpec, DiskTier, LaunchRequest
from tests.providers.aws.moto_cloud import (
    IMAGE_ID,
    REGION,
    Ec2Market,
    fake_credentials,
    in_process,
    make_provider,
)


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[AwsProvider, Ec2Market]]:
    fake_credentials(monkeypatch, tmp_path)
    with in_process():
        yield make_provider()


# One of moto's own public AMIs whose root device is /dev/xvda (not EC2's default /dev/sda1).
XVDA_IMAGE = "ami-760aaa0f"


def _launch(provider: AwsProvider, **fields: Any) -> Any:
    request = LaunchRequest(
        instance_type="g5.xlarge",
        region=REGION,
        zone="us-east-1a",
        bootstrap_command=["python", "-m", "spothop.agent", "run", "--", "true"],
        **fields,
    )
    return provider.launch(request)


def _root_volume(provider: AwsProvider, instance_id: str) -> dict[str, Any]:
    client = provider.client(REGION)
    raw = client.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    (mapping,) = [m for m in raw["BlockDeviceMappings"] if m["DeviceName"] == raw["RootDeviceName"]]
    (volume,) = client.describe_volumes(VolumeIds=[mapping["Ebs"]["VolumeId"]])["Volumes"]
    return {"image": raw["ImageId"], "device": raw["RootDeviceName"], **volume}


def test_the_disk_sizes_the_root_volume_of_the_job_image(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    image = XVDA_IMAGE
    instance = _launch(provider, image_id=image, disk=DiskSpec(300, DiskTier.HIGH))
    (params,) = [p for name, p in market.calls if name == "RunInstances"]
    assert params["ImageId"] == image
    assert params["BlockDeviceMappings"] == [
        {
            "DeviceName": "/dev/xvda",
            "Ebs": {
                "DeleteOnTermination": True,
                "VolumeType": "gp3",
                "Iops": 16000,
                "Throughput": 1000,
                "VolumeSize": 300,
            },
        }
    ]
    volume = _root_volume(provider, instance.instance_id)
    assert volume["image"] == image and volume["device"] == "/dev/xvda"
    assert volume["Size"] == 300


def test_without_a_disk_nothing_is_mapped_and_the_configured_image_boots(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, market = ec2
    _launch(provider)
    (params,) = [p for name, p in market.calls if name == "RunInstances"]
    assert params["ImageId"] == IMAGE_ID and "BlockDeviceMappings" not in params


def test_an_image_ec2_does_not_know_is_its_own_refusal(
    ec2: tuple[AwsProvider, Ec2Market],
) -> None:
    provider, _ = ec2
    with pytest.raises(ProviderError) as caught:
        _launch(provider, image_id="ami-00000000000000bad", disk=DiskSpec(100))
    assert caught.value.code == "InvalidAMIID.NotFound"


@pytest.mark.parametrize(
    ("disk", "expected"),
    [
        (DiskSpec(50), {"VolumeType": "gp3", "VolumeSize": 50}),
        (DiskSpec(None, DiskTier.MEDIUM), {"VolumeType": "gp3", "Iops": 6000}),
        (DiskSpec(40, DiskTier.ULTRA), {"VolumeType": "io2", "Iops": 20000, "VolumeSize": 40}),
        (DiskSpec(1000, DiskTier.BEST), {"VolumeType": "io2", "Iops": 64000}),
    ],
)
def test_each_tier_is_an_ebs_volume_type(disk: DiskSpec, expected: dict[str, Any]) -> None:
    ebs = ebs_volume(disk)
    assert {k: ebs.get(k) for k in expected} == expected
    assert ("VolumeSize" in ebs) is (disk.size_gib is not None)
