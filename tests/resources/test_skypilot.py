import datetime as dt
from collections import Counter

import pytest

from spothop.errors import CatalogError
from spothop.resources.offering import Interconnect
from spothop.resources.sources.skypilot import import_skypilot_file, import_skypilot_text
from tests.conftest import shared_path

DATE = dt.date(2026, 11, 1)

# SkyPilot's AWS layout: GpuInfo before Price, AvailabilityZone last.
AWS_VMS = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\r\n"
    "p5.48xlarge,H100,8,192,2048,\"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 655360}\",55.04,21.1,us-east-1,us-east-1a\r\n"
    "p4de.24xlarge,A100-80GB,8,96,1152,\"{'Gpus': [{'Name': 'A100', 'Manufacturer': 'NVIDIA', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 655360}\",40.96,,us-east-1,us-east-1b\r\n"
    "g5.xlarge,A10G,1,4,16,\"{'Gpus': [{'Name': 'A10G', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 24576}}], 'TotalGpuMemoryInMiB': 24576}\",1.006,0.41,us-east-1,us-east-1a\r\n"
    "m5.large,,,2,8,,0.096,0.04,us-east-1,us-east-1a\r\n"
)

# SkyPilot's GCP layout: an n1 VM row plus a separately priced accelerator row.
GCP_VMS = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
    "n1-standard-8,8,30,,,,us-central1,us-central1-a,0.38,0.08\n"
    "n1-standard-32,32,120,,,,us-central1,us-central1-a,1.52,0.32\n"
    ",,,T4,1,,us-central1,us-central1-a,0.35,0.14\n"
    ",,,V100,4,,us-central1,us-central1-a,9.92,3.96\n"
    ",,,P100,2,,us-central1,us-central1-b,2.92,0.86\n"
    "a2-ultragpu-8g,96,1360,A100-80GB,8,,us-central1,us-central1-a,40.22,12.06\n"
)


def test_aws_layout_reads_by_column_name_and_memory_picks_the_variant():
    report = import_skypilot_text(AWS_VMS, "aws/vms.csv", "aws", DATE)
    assert report.rows == 4 and report.accounted == 4
    by_type = {o.instance_type: o for o in report.offerings}
    assert by_type["p5.48xlarge"].gpu == "H100-SXM5-80GB"
    assert by_type["p5.48xlarge"].interconnect is Interconnect.NVSWITCH
    assert by_type["p5.48xlarge"].spot_price_usd_per_hour == 21.1
    assert by_type["p4de.24xlarge"].gpu == "A100-SXM4-80GB"
    assert by_type["p4de.24xlarge"].spot_price_usd_per_hour is None
    assert by_type["g5.xlarge"].interconnect is Interconnect.NONE
    assert [(e.line, e.field) for e in report.refused] == [(5, "AcceleratorName")]
    assert "CPU-only" in report.refused[0].reason


def test_gcp_accelerator_rows_are_priced_on_their_host_vm():
    report = import_skypilot_text(GCP_VMS, "gcp/vms.csv", "gcp", DATE)
    by_type = {o.instance_type: o for o in report.offerings}
    t4 = by_type["n1-standard-8+1xT4"]
    assert t4.on_demand_price_usd_per_hour == pytest.approx(0.38 + 0.35)
    assert t4.spot_price_usd_per_hour == pytest.approx(0.08 + 0.14)
    assert (t4.vcpus, t4.memory_gib, t4.gpu) == (8, 30, "T4")
    v100 = by_type["n1-standard-32+4xV100"]
    assert v100.on_demand_price_usd_per_hour == pytest.approx(1.52 + 9.92)
    assert by_type["a2-ultragpu-8g"].on_demand_price_usd_per_hour == 40.22
    refused = {e.line: e.reason for e in report.refused}
    # Two CPU-only host rows, and a P100 row whose zone has no n1-standard-16 host.
    assert set(refused) == {2, 3, 6}
    assert "no n1 host VM in zone 'us-central1-b'" in refused[6]
    assert report.accounted == report.rows == 6


def test_not_a_skypilot_file_is_a_file_level_error():
    with pytest.raises(CatalogError, match=r"not a SkyPilot vms\.csv"):
        import_skypilot_text("a,b\n1,2\n", "x.csv", "x", DATE)


def test_bad_rows_are_refused_with_reasons():
    text = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
        "gpu_1x_a10,A10,1,30,200,0.75,us-east-1,,\n"
        "gpu_1x_a10,A10,1,30,200,0.75,us-east-1,,\n"
        "gpu_1x_zz,ZZ9000,1,30,200,0.75,us-east-1,,\n"
        "gpu_1x_a10,A10,1,30,200,-1,us-west-1,,\n"
        "gpu_1x_a10,A10,1,30,200,0,us-west-2,,\n"
        "gpu_0x_a10,A10,0,30,200,1,us-west-3,,\n"
        "gpu_1x_a10,A10,1,lots,200,1,us-west-4,,\n"
    )
    report = import_skypilot_text(text, "lambda/vms.csv", "lambda", DATE)
    assert len(report.offerings) == 1
    reasons = {e.line: (e.field, e.reason) for e in report.refused}
    assert reasons[3][1].startswith("duplicate of line 2")
    assert reasons[4][0] == "AcceleratorName" and "ZZ9000" in reasons[4][1]
    assert reasons[5] == ("Price", "Price must be between 0 and 10000 USD per hour, got -1.0")
    assert reasons[6][0] == "Price"
    assert reasons[7][0] == "AcceleratorCount"
    assert reasons[8][0] == "vCPUs"
    assert report.accounted == report.rows == 7


def test_shared_lambda_catalog_every_row_accounted():
    report = import_skypilot_file(
        shared_path("catalog", "skypilot-v7", "lambda", "vms.csv"), price_date=DATE
    )
    assert report.provider == "lambda"
    assert report.rows == 323
    assert report.accounted == 323
    refused = Counter(e.reason.split(" ")[0] for e in report.refused)
    assert refused == {"CPU-only": 17}, [
        str(e) for e in report.refused if "CPU-only" not in e.reason
    ][:5]
    gpus = {o.instance_type: o.gpu for o in report.offerings}
    assert gpus["gpu_1x_a100_sxm4"] == "A100-SXM4-40GB"
    assert gpus["gpu_8x_a100_80gb_sxm4"] == "A100-SXM4-80GB"
    assert gpus["gpu_1x_h100_pcie"] == "H100-PCIE-80GB"
    assert gpus["gpu_8x_h100_sxm5"] == "H100-SXM5-80GB"
    assert all(o.spot_price_usd_per_hour is None for o in report.offerings)


def test_shared_vast_catalog_every_row_accounted():
    report = import_skypilot_file(
        shared_path("catalog", "skypilot-v7", "vast", "vms.csv"), price_date=DATE
    )
    assert report.rows == 61
    assert report.accounted == 61
    assert len(report.offerings) >= 55
    for error in report.refused:  # whatever is refused says why, naming the field
        assert error.field and error.reason
    h200 = [o for o in report.offerings if o.gpu.startswith("H200")]
    assert h200 and all(o.spot_price_usd_per_hour is None for o in h200)  # Vast's 0.00 = no spot
    assert {o.region for o in report.offerings} >= {"Czechia, CZ, EU"}
