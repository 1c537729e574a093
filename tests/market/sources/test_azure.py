"""The Azure low-priority daily tables: sizes as the API spells them, the region from the file name."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.market.sources.azure import (
    AzureLowPriorityCsv,
    azure_region_from_file,
    azure_size_name,
)
from tests.conftest import shared_path


@pytest.mark.parametrize(
    ("file", "region"),
    [
        ("us_south_central.csv", "southcentralus"),
        ("us_east.csv", "eastus"),
        ("eastus.csv", "eastus"),  # already Azure's spelling
    ],
)
def test_the_file_name_gives_the_region(file: str, region: str) -> None:
    assert azure_region_from_file(Path(file)) == region


def test_portal_size_names_become_api_names() -> None:
    assert azure_size_name("NC24rs v3") == "Standard_NC24rs_v3"
    assert azure_size_name("Standard_NC6") == "Standard_NC6"


def test_a_shared_table_is_keyed_per_region_with_no_zone() -> None:
    source = AzureLowPriorityCsv()
    imported = source.read(shared_path("prices", "azure-low-priority-2020", "us_east.csv"))
    keys = {source.key(p) for p in imported.points}
    assert keys and {(k.market.provider, k.market.region, k.market.zone) for k in keys} == {
        ("azure", "eastus", "")
    }
    assert all(k.market.regional and k.product == "low-priority" for k in keys)
    assert all(k.market.instance_type.startswith("Standard_NC") for k in keys)


def test_bad_cells_are_reported_with_line_and_column_and_the_rest_read(tmp_path: Path) -> None:
    path = tmp_path / "us_west.csv"
    path.write_text(
        "Date,NC6,NC12\n2/24/2020,$0.2,abc\n2/24/2020,$0.2,$0.4\nnot a date,$1,$2\n2/26/2020,,$0\n"
    )
    imported = AzureLowPriorityCsv().read(path)
    assert [(p.line, p.instance_type, p.region) for p in imported.points] == [
        (2, "Standard_NC6", "westus")
    ]
    assert [(p.line, p.reason) for p in imported.problems] == [
        (2, "column 'NC12': bad number 'abc'"),
        (3, "duplicate of line 2"),
        (4, "unparsable date 'not a date' (expected M/D/YYYY or YYYY-MM-DD)"),
        (5, "column 'NC12': price 0.0 <= 0"),
    ]
