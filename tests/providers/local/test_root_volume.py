"""The local cloud records the root volume and machine image a launch asks for (its hosts share
this machine's disk, so nothing is made); a launch that asks for none records none."""

from __future__ import annotations

from spothop.providers.base import DiskSpec, DiskTier, LaunchRequest
from spothop.providers.local.provider import LocalProvider


def _launch(provider: LocalProvider, **fields):  # type: ignore[no-untyped-def]
    request = LaunchRequest(
        instance_type="g5.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=["bash", "-c", "sleep 300"],
        **fields,
    )
    return provider.launch(request)


def test_the_disk_and_image_asked_for_are_recorded(aws: LocalProvider) -> None:
    asked = _launch(aws, disk=DiskSpec(256, DiskTier.ULTRA), image_id="ami-0123456789abcdef0")
    plain = _launch(aws)
    assert aws.root_volume(asked.instance_id) == {
        "size_gib": 256,
        "tier": "ultra",
        "image_id": "ami-0123456789abcdef0",
    }
    assert aws.root_volume(plain.instance_id) == {"size_gib": None, "tier": None, "image_id": None}
