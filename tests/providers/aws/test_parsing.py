"""EC2's documented answers read without a cloud: GPU types, network figures, price lists, user-data."""

from __future__ import annotations

import json

import pytest

from spothop.errors import ConfigError
from spothop.providers.aws.offerings import gpu_type, network_gbps, on_demand_prices
from spothop.providers.aws.userdata import USER_DATA_MAX_BYTES, render_user_data
from spothop.resources.offering import Interconnect


def _type(name: str, gpu: str, count: int, memory_mib: int) -> dict[str, object]:
    return {
        "InstanceType": name,
        "VCpuInfo": {"DefaultVCpus": 96},
        "MemoryInfo": {"SizeInMiB": 1179648},
        "GpuInfo": {
            "Gpus": [
                {
                    "Name": gpu,
                    "Manufacturer": "NVIDIA",
                    "Count": count,
                    "MemoryInfo": {"SizeInMiB": memory_mib},
                }
            ]
        },
        "NetworkInfo": {"NetworkPerformance": "4x 100 Gigabit"},
        "InstanceStorageInfo": {"TotalSizeInGB": 8000},
        "SupportedUsageClasses": ["on-demand", "spot"],
    }


def test_memory_settles_which_a100_a_type_carries() -> None:
    p4d = gpu_type(_type("p4d.24xlarge", "A100", 8, 40960))
    p4de = gpu_type(_type("p4de.24xlarge", "A100", 8, 81920))
    assert p4d is not None and p4de is not None
    assert (p4d.gpu.name, p4de.gpu.name) == ("A100-SXM4-40GB", "A100-SXM4-80GB")
    assert (p4d.gpu_count, p4d.memory_gib, p4d.network_bandwidth_gbps, p4d.spot) == (
        8,
        1152.0,
        400.0,
        True,
    )


def test_types_without_gpus_or_with_gpus_spothop_does_not_know_are_left_out() -> None:
    assert gpu_type({"InstanceType": "m5.large"}) is None
    assert gpu_type(_type("g4ad.xlarge", "Radeon Pro V520", 1, 8192)) is None


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("Up to 25 Gigabit", 25.0),
        ("8x 100 Gigabit", 800.0),
        ("3200 Gigabit", 3200.0),
        ("Low", None),
        (None, None),
    ],
)
def test_network_performance_reads_as_gbps(text: str | None, gbps: float | None) -> None:
    assert network_gbps(text) == gbps


def test_the_price_list_gives_hourly_usd_per_type_and_skips_zero_rows() -> None:
    def item(instance_type: str, usd: str, unit: str = "Hrs") -> str:
        dimension = {"unit": unit, "pricePerUnit": {"USD": usd}}
        return json.dumps(
            {
                "product": {"attributes": {"instanceType": instance_type}},
                "terms": {"OnDemand": {"T": {"priceDimensions": {"D": dimension}}}},
            }
        )

    prices = on_demand_prices([item("p5.48xlarge", "55.04"), item("g5.xlarge", "0.0000000000")])
    assert prices == {"p5.48xlarge": 55.04}


def test_user_data_here_documents_cannot_be_ended_by_a_value() -> None:
    command = ["python", "-c", "print(1)\nSPOTHOP_END\n"]
    script = render_user_data(command, {"NOTE": "a\nline"})
    marker = next(
        line for line in script.splitlines() if line.startswith("cat > /etc/spothop/agent.env")
    )
    end = marker.split("<<'")[1].rstrip("'")
    assert end.startswith("SPOTHOP_END_") and script.count(f"\n{end}\n") == 3
    assert end not in "".join(command)


def test_user_data_over_the_limit_or_without_a_command_is_refused() -> None:
    with pytest.raises(ConfigError, match=str(USER_DATA_MAX_BYTES)):
        render_user_data(["run"], {"BIG": "x" * USER_DATA_MAX_BYTES})
    with pytest.raises(ConfigError, match="bootstrap command"):
        render_user_data([], {})
    with pytest.raises(ConfigError, match="not a shell variable"):
        render_user_data(["run"], {"1BAD": "x"})


def test_interconnect_is_the_catalogs_or_follows_the_family() -> None:
    from spothop.providers.aws.offerings import interconnect

    assert interconnect("p5.48xlarge", 8, None) is Interconnect.NVSWITCH
    assert interconnect("g6.12xlarge", 4, None) is Interconnect.PCIE
    assert interconnect("g6.xlarge", 1, None) is Interconnect.NONE
    assert interconnect("p3.8xlarge", 4, Interconnect.NVLINK) is Interconnect.NVLINK


@pytest.mark.parametrize(
    ("code", "scoped"),
    [
        ("InvalidAMIID.NotFound", True),  # an AMI lives in one region
        ("InvalidGroup.NotFound", True),
        ("InvalidSubnetID.NotFound", True),
        ("OptInRequired", True),  # a region not enabled
        ("UnauthorizedOperation", False),  # a missing permission is the account's, everywhere
        ("AuthFailure", False),
        ("InvalidParameterValue", False),
    ],
)
def test_errors_that_hold_in_one_region_refuse_only_that_region(code: str, scoped: bool) -> None:
    from spothop.providers.aws.errors import map_error

    assert map_error("aws", code, "the cloud's message").region_scoped is scoped


def test_an_instance_profile_that_does_not_exist_is_refused_naming_the_option() -> None:
    from spothop.errors import InvalidRequest
    from spothop.providers.aws.errors import map_error

    error = map_error("aws", "NoSuchEntity", "Instance profile no-such-profile not found")
    assert isinstance(error, InvalidRequest)  # the provider is refused for the job, no failover
    assert "SPOTHOP_AWS_INSTANCE_PROFILE" in str(error) and "no-such-profile" in str(error)
