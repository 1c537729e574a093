"""Queries, catalog and rate files, the probe budget and topology text: bad input is one clear error, and what was once wrong stays fixed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from spothop.errors import CatalogError, ConfigError, CurrencyError
from spothop.resources.catalog import (
    Catalog,
    OfferQuery,
    check_names,
    read_catalog_file,
    read_catalog_text,
)
from spothop.resources.currency import RateTable, parse_rate_table
from spothop.resources.diff import PriceChanged, change_json, diff_catalogs
from spothop.resources.offering import Interconnect, Offering
from spothop.resources.probe import probe
from spothop.resources.sources.skypilot import import_skypilot_file, import_skypilot_text
from spothop.resources.topology import parse_file
from spothop.resources.topology.fabric import with_fabric_links
from tests.conftest import shared_path

DATE = dt.date(2026, 11, 1)


def _offering(provider: str = "aws", region: str = "us-east-1") -> Offering:
    return Offering(
        provider=provider,
        region=region,
        instance_type="g5.xlarge",
        gpu="A10G",
        gpu_count=1,
        vcpus=4,
        memory_gib=16,
        interconnect=Interconnect.NONE,
        on_demand_price_usd_per_hour=1.0,
        spot_price_usd_per_hour=0.4,
        price_date=DATE,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "--limit must be at least 1"),
        (
            {"limit": -2},
            "--limit must be at least 1",
        ),  # a negative slice used to drop the last rows
        ({"min_tflops": -5.0}, "--min-tflops must be between 0 and 100000 TFLOPS, got -5.0"),
        (
            {"min_gpu_memory_gib": float("nan")},
            "--min-gpu-memory must be between 0 and 4096 GiB, got nan",
        ),
        (
            {"max_usd_per_gpu_hour": float("nan")},
            "--max-price must be greater than 0 and at most 200 USD per GPU-hour",
        ),
    ],
)
def test_offer_query_refuses_nonsense_bounds(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        OfferQuery(**kwargs)  # type: ignore[arg-type]


def test_provider_and_region_filters_ignore_case() -> None:
    catalog = Catalog([_offering()])
    assert len(catalog.query(OfferQuery(providers=("AWS",), regions=("US-EAST-1",)))) == 1


def test_unknown_provider_is_an_error_with_a_suggestion() -> None:
    offerings = [_offering("lambda"), _offering("aws")]
    with pytest.raises(
        ConfigError, match=r"--provider 'lamda'.*did you mean 'lambda'.*known: aws, lambda"
    ):
        check_names(OfferQuery(providers=("lamda",)), offerings)
    with pytest.raises(ConfigError, match=r"--region 'us-east1'.*did you mean 'us-east-1'"):
        check_names(OfferQuery(regions=("us-east1",)), offerings)
    check_names(OfferQuery(providers=("AWS",), regions=("us-east-1",)), offerings)


def test_binary_files_are_catalog_errors_not_tracebacks(tmp_path: Path) -> None:
    junk = tmp_path / "vms.csv"
    junk.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(CatalogError, match="not a text file"):
        import_skypilot_file(junk)
    with pytest.raises(CatalogError, match="not a text file"):
        read_catalog_file(junk)


def test_gcp_accelerator_rows_for_a2_only_gpus_are_refused_not_put_on_n1() -> None:
    text = (
        "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
        "n1-standard-8,8,30,,,,us-central1,us-central1-a,0.38,0.08\n"
        ",,,A100,1,,us-central1,us-central1-a,3.67,1.1\n"
        ",,,T4,1,,us-central1,us-central1-a,0.35,0.14\n"
    )
    report = import_skypilot_text(text, "gcp/vms.csv", "gcp", DATE)
    assert [o.instance_type for o in report.offerings] == ["n1-standard-8+1xT4"]
    refused = {e.line: e.reason for e in report.refused}
    assert "attaches it only to its own machine types" in refused[3]
    assert report.accounted == report.rows == 3


CNY_HEADER = (
    "provider,region,zone,instance_type,gpu,gpu_count,vcpus,memory_gib,local_disk_gib,"
    "network_bandwidth_gbps,interconnect,currency,on_demand_price,spot_price,price_date\n"
)


def test_diff_of_cny_rows_shows_the_cloud_own_currency() -> None:
    rates = RateTable(as_of=DATE, usd_per_unit={"USD": 1.0, "CNY": 0.14})
    row = "aliyun,cn-hangzhou,cn-hangzhou-i,ecs.gn6i-c4g1.xlarge,T4,1,4,15,,4,none,CNY,{od},1.5,2025-07-01\n"
    old = read_catalog_text(CNY_HEADER + row.format(od=10), "old.csv", rates).offerings
    new = read_catalog_text(CNY_HEADER + row.format(od=12), "new.csv", rates).offerings
    [change] = diff_catalogs(old, new)
    assert isinstance(change, PriceChanged)
    assert change.change_pct == pytest.approx(20.0)
    assert "CNY 10 → 12" in change.describe()
    data = change_json(change)
    assert (data["currency"], data["old_original"], data["new_original"], data["gpu"]) == (
        "CNY",
        10.0,
        12.0,
        "T4",
    )


def test_malformed_rate_yaml_is_one_line_naming_the_place() -> None:
    with pytest.raises(CurrencyError) as caught:
        parse_rate_table("[1, 2\n", "my-rates.yaml")
    message = str(caught.value)
    assert (
        "\n" not in message
        and "my-rates.yaml: not valid YAML at line" in message
        and "as_of" in message
    )


@pytest.mark.parametrize("budget", [float("nan"), float("inf")])
def test_probe_budget_must_be_finite(budget: float) -> None:
    with pytest.raises(ConfigError, match="budget must be positive"):
        probe(budget_s=budget, backend="numpy")


def test_h100_sxm_query_text_gets_its_nvswitch_links() -> None:
    topo = parse_file(shared_path("nvidia-smi", "thamada-text", "H100SXMx8_smi_-a.txt"))
    assert topo.links is not None
    assert {topo.nvlink_count(i, j) for i in range(8) for j in range(8) if i != j} == {18}
    assert any("links inferred" in note for note in topo.notes)


def test_no_links_are_inferred_unless_every_gpu_joined_the_fabric() -> None:
    topo = parse_file(shared_path("nvidia-smi", "thamada-text", "H100SXMx8_smi_-a.txt"))
    bare = topo.model_copy(update={"links": None, "notes": ()})
    gpus = list(bare.gpus)
    gpus[3] = gpus[3].model_copy(update={"fabric_state": "In Progress"})
    assert with_fabric_links(bare.model_copy(update={"gpus": tuple(gpus)})).links is None
    # PCIe boards report N/A and stay without links.
    assert parse_file(shared_path("nvidia-smi", "thamada-text", "RTX4090_smi_-a.txt")).links is None
