"""Any text as a spothop catalog CSV: valid offerings, or spothop's error naming the file and line."""

from __future__ import annotations

from importlib import resources as importlib_resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spothop.errors import CatalogError, CatalogRowError
from spothop.resources.catalog import read_catalog_file, read_catalog_text
from spothop.resources.currency import builtin_rates
from tests.hostile_text import PROPERTY_SETTINGS, head, hostile
from tests.resources.offering_checks import assert_valid_offering

_FOLDER = importlib_resources.files("spothop.resources").joinpath("data/catalog")
SAMPLES = [
    head(_FOLDER.joinpath(name).read_text(encoding="utf-8"), 12)
    for name in ("aws.csv", "aliyun.csv", "lambda.csv")
]
RATES = builtin_rates()


@PROPERTY_SETTINGS
@given(hostile(SAMPLES))
def test_any_catalog_text_gives_valid_offerings_or_errors_naming_file_and_line(text: str) -> None:
    try:
        result = read_catalog_text(text, "mine.csv", RATES)
    except CatalogError as exc:
        assert not isinstance(exc, CatalogRowError)
        assert str(exc).startswith("mine.csv")
        return
    for error in result.errors:
        assert (
            error.path == "mine.csv"
            and error.line >= 1
            and str(error).startswith(f"mine.csv:{error.line}")
        )
    for offering in result.offerings:
        assert_valid_offering(offering, RATES)


@PROPERTY_SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_as_a_catalog_file_load_or_name_the_file(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("catalog") / "mine.csv"
    path.write_bytes(data)
    try:
        result = read_catalog_file(path, RATES)
    except CatalogError as exc:
        assert str(path) in str(exc)
        return
    assert all(error.path == str(path) for error in result.errors)
