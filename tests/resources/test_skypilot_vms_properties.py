"""Any text as a SkyPilot vms.csv: every row imported (valid, storable) or refused with its line, or a file error."""

from __future__ import annotations

import datetime as dt

from hypothesis import given

from spothop.errors import CatalogError
from spothop.resources.currency import builtin_rates
from spothop.resources.sources.skypilot import import_skypilot_text
from tests.hostile_text import PROPERTY_SETTINGS, head, hostile, shared_sample
from tests.resources.offering_checks import assert_valid_offering
from tests.resources.test_skypilot import AWS_VMS, GCP_VMS

SAMPLES = [AWS_VMS, GCP_VMS] + [
    head(
        shared_sample("catalog", "skypilot-v7", cloud, "vms.csv").read_text(encoding="utf-8-sig"), 8
    )
    for cloud in ("lambda", "vast")
]
RATES = builtin_rates()
DATE = dt.date(2026, 11, 1)


@PROPERTY_SETTINGS
@given(hostile(SAMPLES))
def test_any_vms_csv_accounts_for_every_row_with_valid_offerings_or_errors_naming_file_and_line(
    text: str,
) -> None:
    try:
        report = import_skypilot_text(text, "aws/vms.csv", "aws", DATE, RATES)
    except CatalogError as exc:
        assert str(exc).startswith("aws/vms.csv:1")
        return
    assert report.accounted == report.rows
    for error in report.refused:
        assert error.path == "aws/vms.csv" and error.line >= 2
        assert str(error).startswith(f"aws/vms.csv:{error.line}")
    for offering in report.offerings:
        assert_valid_offering(offering, RATES)
