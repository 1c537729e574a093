"""Requirements as filters over offerings, and what each one excluded."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError, UnknownGpuError
from spothop.providers.fake.factories import make_offering
from spothop.resources.offering import Interconnect
from spothop.scheduler.requirements import FILTERS, Requirements


def test_a_default_requirements_lets_every_offering_through() -> None:
    assert Requirements().qualifies(make_offering())


def test_a_gpu_family_means_every_variant_and_a_canonical_name_one() -> None:
    h100 = make_offering(gpu="H100-SXM5-80GB")
    a100 = make_offering(gpu="A100-SXM4-80GB")
    assert Requirements(gpu="H100").qualifies(h100)
    assert Requirements(gpu="H100").failed(a100) == ["gpu"]
    assert Requirements(gpu="A100-SXM4-80GB").qualifies(a100)


def test_an_unknown_gpu_is_refused_when_the_requirements_are_made() -> None:
    with pytest.raises(UnknownGpuError, match=r"did you mean|H100"):
        Requirements(gpu="H1OO")


def test_each_failing_filter_is_named() -> None:
    offering = make_offering(gpu_count=1, vcpus=8.0, memory_gib=32.0, interconnect="pcie")
    req = Requirements(
        gpus_per_node=8,
        min_cpus=16,
        min_memory_gib=64,
        interconnect=Interconnect.NVLINK,
        providers_deny=("fake",),
        zones=("elsewhere-1a",),
    )
    assert req.failed(offering) == [
        "providers",
        "zones",
        "gpus_per_node",
        "interconnect",
        "min_cpus",
        "min_memory_gib",
    ]
    assert set(req.failed(offering)) <= set(FILTERS)


def test_deny_wins_over_allow_and_an_empty_allow_allows_all() -> None:
    assert Requirements(providers_allow=("fake",), providers_deny=("fake",)).failed(
        make_offering()
    ) == ["providers"]
    assert Requirements(providers_allow=("other",)).failed(make_offering()) == ["providers"]
    assert Requirements(providers_deny=("other",)).qualifies(make_offering())


def test_an_offering_must_meet_one_alternative_and_the_shared_fields() -> None:
    req = Requirements(
        providers_allow=("fake",),
        alternatives=(Requirements(gpu="A100"), Requirements(gpu="H100", gpus_per_node=1)),
    )
    assert req.qualifies(make_offering(gpu="H100-SXM5-80GB"))
    assert req.failed(make_offering(gpu="L4")) == ["any_of"]
    assert req.failed(make_offering(provider="other", gpu="L4")) == ["providers", "any_of"]


def test_nonsense_bounds_are_refused_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="gpus_per_node"):
        Requirements(gpus_per_node=0)
    with pytest.raises(ConfigError, match="min_memory_gib"):
        Requirements(min_memory_gib=-1)


def test_requirements_are_hashable_values_with_a_json_form() -> None:
    a = Requirements(gpu="H100", zones=("z1",))
    assert a == Requirements(gpu="H100", zones=("z1",))
    assert hash(a) == hash(Requirements(gpu="H100", zones=("z1",)))
    assert a.to_dict() == {"gpu": "H100", "zones": ["z1"]}
