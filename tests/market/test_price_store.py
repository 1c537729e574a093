"""Price history in the store: the shared AWS and Azure files, idempotence, bad input."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.db import make_engine
from spothop.market import MarketId, PriceSeriesKey, PriceStore, TraceError, detect_price_source
from tests.conftest import shared_path

AWS_CSV = ("prices", "aws-spot-price-history-p2-p3-2019-2020.csv")
AWS_CSV_POINTS = 16_560  # shared/data/README.md
GPUS = {
    ("aws", "p3.2xlarge"): ("V100-SXM2-16GB", 1),
    ("aws", "p3.8xlarge"): ("V100-SXM2-16GB", 4),
    ("aws", "p3.16xlarge"): ("V100-SXM2-16GB", 8),
}


@pytest.fixture
def store(tmp_path: Path) -> PriceStore:
    return PriceStore(
        engine=make_engine(f"sqlite:///{tmp_path}/prices.db"),
        gpu_lookup=lambda p, t: GPUS.get((p, t)),
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_shared_aws_history_stores_every_point_once(store: PriceStore) -> None:
    path = shared_path(*AWS_CSV)
    first = store.import_file(path)
    assert (first.format, first.added, first.problems) == ("aws-csv", AWS_CSV_POINTS, [])
    assert store.count() == AWS_CSV_POINTS
    again = store.import_file(path)
    assert again.added == 0 and len(again.duplicates) == AWS_CSV_POINTS
    assert again.duplicates[0].line == 2 and "already stored" in again.duplicates[0].reason
    assert store.count() == AWS_CSV_POINTS
    # p2 types are not in the built-in catalog: reported, never guessed
    assert first.no_gpu_count == ["aws/p2.16xlarge", "aws/p2.8xlarge", "aws/p2.xlarge"]


def test_per_gpu_price_uses_the_catalog_count(store: PriceStore) -> None:
    store.import_file(shared_path(*AWS_CSV))
    p3_16 = [
        p
        for p in store.points(gpus=["V100-SXM2-16GB"])
        if p.series.market.instance_type == "p3.16xlarge"
    ]
    assert p3_16 and all(p.gpu_count == 8 for p in p3_16)
    assert p3_16[0].usd_per_gpu_second == pytest.approx(p3_16[0].price_usd_per_hour / 8 / 3600)
    p2 = [p for p in store.points() if p.series.market.instance_type == "p2.xlarge"]
    assert p2 and all(p.usd_per_gpu_second is None and p.gpu_count is None for p in p2)


def test_overlapping_aws_json_files_report_the_overlap_as_duplicates(store: PriceStore) -> None:
    folder = shared_path("prices", "aws-describe-spot-price-history-raw", "us-east-2")
    first = store.import_file(folder / "p3.2xlarge.json")
    second = store.import_file(folder / "2020-02-27.p3.2xlarge.json")
    assert (
        first.format == "aws-json" and first.added == 551 and first.out_of_order == []
    )  # newest-first is an order
    # the weekly file starts where the long one ends: its oldest points are already stored
    assert second.added + len(second.duplicates) == 63 and second.duplicates
    assert all(d.record is not None for d in second.duplicates)
    assert {p.series.market.region for p in store.points()} == {"us-east-2"}


def test_azure_low_priority_tables_import_per_region(store: PriceStore) -> None:
    folder = shared_path("prices", "azure-low-priority-2020")
    report = store.import_file(folder / "us_north_central.csv")
    assert report.format == "azure-csv" and report.problems == []
    assert report.added == 29 * 4  # 29 days × the 4 sizes sold there (NC6, NC12, NC24, NC24r)
    keys = {p.series for p in store.points()}
    assert (
        PriceSeriesKey(
            MarketId("azure", "northcentralus", "", "Standard_NC6"), True, "low-priority"
        )
        in keys
    )
    assert report.rejected == [] and {p.series.market.zone for p in store.points()} == {""}


def test_bad_rows_are_reported_with_their_line_and_the_rest_imported(
    store: PriceStore, tmp_path: Path
) -> None:
    path = write(
        tmp_path / "bad.csv",
        "\n".join(
            [
                "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice",
                "2020-01-01T00:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.9",
                "2020-01-01T02:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0",
                "2020-01-01T03:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,-1.5",
                "2020-01-01T04:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.95",
                "2020-01-01T01:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.92",
                "2020-01-01T04:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.95",
                "not a time,us-east-1a,p3.2xlarge,Linux/UNIX,0.95",
            ]
        )
        + "\n",
    )
    report = store.import_file(path)
    assert report.added == 3
    assert [(p.line, p.reason.split()[0]) for p in report.rejected] == [
        (3, "price"),
        (4, "price"),
        (8, "unparsable"),
    ]
    assert [p.line for p in report.duplicates] == [7]
    assert [p.line for p in report.out_of_order] == [6]
    assert [p.price_usd_per_hour for p in store.points()] == [
        0.9,
        0.92,
        0.95,
    ]  # stored in time order


def test_unknown_format_raises_naming_the_formats(tmp_path: Path, store: PriceStore) -> None:
    path = write(tmp_path / "x.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match="known formats: aws-csv, aws-json, azure-csv"):
        store.import_file(path)
    with pytest.raises(TraceError, match="unknown format 'parquet'"):
        store.import_file(path, "parquet")
    aws = write(
        tmp_path / "y.txt", "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice\n"
    )
    assert detect_price_source(aws).name == "aws-csv"


@dataclass(frozen=True)
class LivePrice:
    provider: str
    region: str
    zone: str | None
    instance_type: str
    price_usd_per_hour: float
    timestamp: float


def test_live_reads_are_recorded_idempotently(store: PriceStore) -> None:
    reads = [
        LivePrice("aws", "us-east-1", "us-east-1a", "p3.2xlarge", 0.95, 1_700_000_000.0),
        LivePrice("aws", "us-east-1", "us-east-1a", "p3.2xlarge", 0.0, 1_700_000_060.0),
        LivePrice("lambda", "us-west-1", None, "gpu_1x_a100", 1.29, 1_700_000_000.0),
    ]
    result = store.record_prices(reads)
    assert result.added == 2 and [p.record for p in result.rejected] == [2]
    assert result.no_gpu_count == ["lambda/gpu_1x_a100"]
    assert store.record_prices(reads[:1]).added == 0
    regional = [p for p in store.points() if p.series.market.provider == "lambda"]
    assert (
        regional[0].series.market.zone == "" and regional[0].series.market.location == "us-west-1"
    )


def test_time_range_and_window_filters(store: PriceStore) -> None:
    assert store.time_range() is None
    store.import_file(shared_path(*AWS_CSV))
    first, last = store.time_range() or (None, None)
    assert first is not None and last is not None
    assert (first.isoformat(), last.isoformat()) == (
        "2019-12-20T06:39:10+00:00",
        "2020-03-23T16:09:42+00:00",
    )
    recent = store.points(since=last.replace(day=20))
    assert recent and all(p.timestamp >= last.replace(day=20) for p in recent)


def test_a_live_read_with_no_region_is_rejected_not_stored(store: PriceStore) -> None:
    reads = [
        LivePrice("aws", "", "us-east-1a", "p3.2xlarge", 0.95, 1_700_000_000.0),
        LivePrice("aws", "us-east-1", "us-east-1a", "p3.2xlarge", 0.95, 1_700_000_000.0),
    ]
    result = store.record_prices(reads)
    assert result.added == 1 and [p.record for p in result.rejected] == [1]
    assert "a price belongs to a named market" in result.rejected[0].reason
