"""An imported catalog never saves a row it could not load back, and a bad saved row never breaks `offers`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import EXIT_BAD_INPUT, EXIT_OK, CatalogError, ConfigError
from spothop.resources.catalog import COLUMNS, load_catalog, read_catalog_text
from spothop.resources.sources.skypilot import import_skypilot_text

DATE = dt.date(2026, 11, 1)
HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
GOOD = "g5.xlarge,A10G,1,4,16,,1.006,0.41,us-east-1,us-east-1a"
H100 = "p5.48xlarge,H100,8,192,2048,,55.04,21.1,us-east-1,us-east-1a"


def vms(*rows: str) -> str:
    return "\n".join((HEADER, *rows)) + "\n"


@pytest.mark.parametrize(
    "row",
    [
        H100.rsplit(",", 2)[0],  # cut before the region: the region would be saved empty
        H100[:30],
        H100 + ",extra",
    ],
)
def test_a_truncated_row_is_refused_at_import_with_its_line(row: str) -> None:
    report = import_skypilot_text(vms(GOOD, row), "aws/vms.csv", "aws", DATE)
    assert [o.instance_type for o in report.offerings] == ["g5.xlarge"]
    [refused] = report.refused
    assert refused.line == 3 and "fields, the header has 10" in refused.reason
    assert "aws/vms.csv:3" in str(refused)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("Price", "nan"),
        ("Price", "inf"),
        ("Price", "1e300"),
        ("SpotPrice", "nan"),
        ("SpotPrice", "-inf"),
        ("AcceleratorCount", "1e9"),
        ("AcceleratorCount", "nan"),
        ("AcceleratorCount", "1.5"),
        ("vCPUs", "inf"),
        ("MemoryGiB", "nan"),
        ("MemoryGiB", "1e12"),
    ],
)
def test_nan_infinities_and_absurd_numbers_are_refused_naming_the_column(
    column: str, value: str
) -> None:
    cells = dict(zip(HEADER.split(","), H100.split(","), strict=True))
    cells[column] = value
    report = import_skypilot_text(vms(",".join(cells.values())), "aws/vms.csv", "aws", DATE)
    assert not report.offerings
    [refused] = report.refused
    assert refused.field == column and "must be" in refused.reason
    assert refused.reason.endswith(f"got {float(value)!r}")


def test_a_row_the_saved_file_would_refuse_is_refused_at_import() -> None:
    row = H100.replace("us-east-1,us-east-1a", " ,us-east-1a")  # a blank region
    report = import_skypilot_text(vms(row), "aws/vms.csv", "aws", DATE)
    assert not report.offerings and report.refused[0].field == "Region"


@pytest.mark.parametrize("provider", ["../../outside", "a/b", ".hidden", "x\x00y"])
def test_a_provider_name_that_is_not_plain_is_refused(provider: str) -> None:
    with pytest.raises(ConfigError, match="not a plain name"):
        import_skypilot_text(vms(GOOD), "vms.csv", provider, DATE)


def test_catalog_import_of_a_provider_that_leaves_the_home_is_refused_and_saves_nothing(
    cli: Callable[..., Any], tmp_path: Path, spothop_home: Path
) -> None:
    source = tmp_path / "vms.csv"
    source.write_text(vms(GOOD))
    result = cli("catalog", "import", str(source), "--provider", "../../escape")
    assert result.code == EXIT_BAD_INPUT and "not a plain name" in result.err
    assert not list(tmp_path.rglob("escape.csv")) and not (spothop_home / "catalog").exists()


def test_an_import_with_a_truncated_row_leaves_offers_working(
    cli: Callable[..., Any], tmp_path: Path, spothop_home: Path
) -> None:
    (tmp_path / "aws").mkdir()
    (tmp_path / "aws" / "vms.csv").write_text(vms(GOOD, H100.rsplit(",", 2)[0]))
    imported = cli("catalog", "import", str(tmp_path / "aws" / "vms.csv"), "--json")
    assert imported.json()[0]["imported"] == 1 and imported.json()[0]["refused"][0]["line"] == 3
    saved = (spothop_home / "catalog" / "aws.csv").read_text()
    assert "p5.48xlarge" not in saved
    offers = cli("offers", "--provider", "aws", "--json")
    assert offers.code == EXIT_OK, offers.err
    assert [o["instance_type"] for o in offers.json()] == ["g5.xlarge"]


def test_a_saved_file_with_a_bad_row_is_reported_and_offers_shows_the_rest(
    cli: Callable[..., Any], spothop_home: Path
) -> None:
    good = "aws,us-east-1,us-east-1a,g5.xlarge,A10G,1,4,16,250,10,none,USD,1.006,0.41,2026-11-01"
    folder = spothop_home / "catalog"
    folder.mkdir()
    (folder / "aws.csv").write_text(
        ",".join(COLUMNS)
        + "\n"
        + good
        + "\n"
        + good[:25]
        + "\n"
        + good.replace("A10G,1,", "A10G,1000000000,")
        + "\n"
    )
    assert len(load_catalog().refused) == 2
    offers = cli("offers", "--provider", "aws", "--json")
    assert offers.code == EXIT_OK
    assert [o["instance_type"] for o in offers.json()] == ["g5.xlarge"]
    assert "aws.csv:3" in offers.err and "aws.csv:4" in offers.err and "gpu_count" in offers.err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-price", "nan"),
        ("--max-price", "inf"),
        ("--max-price", "1e9"),
        ("--min-tflops", "nan"),
        ("--min-tflops", "1e300"),
        ("--count", "1000000000"),
        ("--min-gpu-memory", "inf"),
        ("--min-gpu-memory", "-1"),
    ],
)
def test_offers_refuses_nan_infinities_and_absurd_options(
    cli: Callable[..., Any], flag: str, value: str
) -> None:
    result = cli("offers", flag, value)
    assert result.code == EXIT_BAD_INPUT and flag in result.err and "must be" in result.err


def test_a_field_larger_than_csv_reads_is_an_error_naming_its_line() -> None:
    huge = GOOD.replace(
        "us-east-1a", '"' + "z" * 200_000 + '"'
    )  # beyond csv's 131,072-character field limit
    with pytest.raises(CatalogError, match=r"aws/vms.csv:3: not readable as CSV"):
        import_skypilot_text(vms(GOOD, huge), "aws/vms.csv", "aws", DATE)
    spothop_row = (
        "aws,us-east-1,"
        + '"'
        + "z" * 200_000
        + '"'
        + ",g5.xlarge,A10G,1,4,16,,,none,USD,1,,2026-11-01"
    )
    with pytest.raises(CatalogError, match=r"mine.csv:2: not readable as CSV"):
        read_catalog_text(",".join(COLUMNS) + "\n" + spothop_row + "\n", "mine.csv")
