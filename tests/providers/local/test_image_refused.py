"""The local cloud has no container runtime: a launch with ``image:`` is an invalid request, the
kind that repeats on every launch, so the controller fails the job with the message
(launch_refused) instead of failing over to every market again and again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spothop.errors import InvalidRequest
from spothop.jobs.controller.launch import refuses_every_launch
from spothop.providers.base import LaunchRequest
from spothop.providers.local.provider import LocalProvider


def test_an_image_on_the_local_cloud_is_refused_for_good() -> None:
    provider = LocalProvider("aws-sim")
    request = LaunchRequest(
        instance_type="g4dn.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=["true"],
        image="ubuntu:22.04",
    )
    with pytest.raises(InvalidRequest, match="no container runtime") as refused:
        provider.launch(request)
    spot_attempt = SimpleNamespace(market_kind="spot")  # all the rule reads of an attempt
    assert refuses_every_launch(refused.value, spot_attempt)  # type: ignore[arg-type]
