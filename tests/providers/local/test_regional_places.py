"""A regional cloud's offerings have no zone: its capacity message names the region."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spothop.errors import CapacityUnavailable
from spothop.providers.base import LaunchRequest
from spothop.providers.local.provider import LocalProvider


def test_no_spot_capacity_in_a_regional_cloud_names_its_region() -> None:
    no_capacity = SimpleNamespace(is_available=lambda key, now: False)
    provider = SimpleNamespace(
        name="regional-sim", codes=SimpleNamespace(capacity_unavailable="X"), _market=no_capacity
    )
    request = LaunchRequest(instance_type="t1", region="eastus", zone=None, bootstrap_command=[])
    key = SimpleNamespace(instance_type="t1", zone="")
    with pytest.raises(CapacityUnavailable, match="no spot capacity for t1 in eastus right now"):
        LocalProvider._check_spot(provider, request, key, 0.0)  # type: ignore[arg-type]
