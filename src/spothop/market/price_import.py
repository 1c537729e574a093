"""Price files → records for the store: format detection and the importers by format.

Formats (``--format`` names):

=================  ======================================================  ==========
name               what                                                    provider
=================  ======================================================  ==========
``aws-csv``        ``Timestamp,AvailabilityZone,InstanceType,...`` CSV      aws (zonal)
``aws-json``       ``aws ec2 describe-spot-price-history`` output as-is    aws (zonal)
``azure-csv``      daily Azure low-priority table, one column per size     azure (regional)
=================  ======================================================  ==========

Detection reads the start of the file: a JSON object with ``SpotPriceHistory``,
a CSV header naming AWS's columns, or a CSV whose first column is ``Date``.
Anything else raises :class:`TraceError` listing the formats.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from spothop.market.azure_prices import parse_azure_date, read_azure_low_priority_csv
from spothop.market.errors import TraceError
from spothop.market.identity import MarketId, PriceSeriesKey, aws_region_of_zone
from spothop.market.price_history import (
    AWS_CSV_COLUMNS,
    PriceImport,
    PricePoint,
    PriceProblem,
    read_aws_price_history_csv,
    read_aws_price_history_json,
)


class PriceFormat(StrEnum):
    AWS_CSV = "aws-csv"
    AWS_JSON = "aws-json"
    AZURE_CSV = "azure-csv"


@dataclass(frozen=True)
class PriceRecord:
    """One price point bound for the store; ``line``/``record`` say where it came from."""

    series: PriceSeriesKey
    timestamp: datetime
    price_usd_per_hour: float
    source: str = ""
    line: int | None = None
    record: int | None = None


def _aws_key(point: PricePoint) -> PriceSeriesKey:
    market = MarketId("aws", aws_region_of_zone(point.zone), point.zone, point.instance_type)
    return PriceSeriesKey(market, spot=True, product=point.product)


def _azure_key(point: PricePoint) -> PriceSeriesKey:
    # The Azure reader carries the region in ``zone``: low-priority prices are regional.
    market = MarketId("azure", point.zone, "", point.instance_type)
    return PriceSeriesKey(market, spot=True, product=point.product)


_READERS: dict[PriceFormat, tuple[Callable[[Path], PriceImport], Callable[[PricePoint], PriceSeriesKey], bool]] = {
    # format: (reader, key of a point, whether positions are file lines (else record numbers))
    PriceFormat.AWS_CSV: (read_aws_price_history_csv, _aws_key, True),
    PriceFormat.AWS_JSON: (read_aws_price_history_json, _aws_key, False),
    PriceFormat.AZURE_CSV: (read_azure_low_priority_csv, _azure_key, True),
}


def detect_price_format(path: Path) -> PriceFormat:
    """The format of a price file from its first bytes; raises TraceError when none fits."""
    if not path.is_file():
        raise TraceError(str(path), "no such file", "check the path")
    head = path.read_text(encoding="utf-8-sig", errors="replace")[:4096]
    stripped = head.lstrip()
    if stripped.startswith("{"):
        if '"SpotPriceHistory"' in head:
            return PriceFormat.AWS_JSON
    else:
        header = stripped.splitlines()[0] if stripped else ""
        columns = [c.strip() for c in header.split(",")]
        if all(c in columns for c in AWS_CSV_COLUMNS):
            return PriceFormat.AWS_CSV
        if columns and columns[0] == "Date" and len(columns) > 1:
            return PriceFormat.AZURE_CSV
    raise TraceError(
        str(path), "unknown price file format",
        f"supported: {', '.join(f.value for f in PriceFormat)}; pass --format to choose one",
    )


def resolve_format(path: Path, fmt: PriceFormat | str | None) -> PriceFormat:
    """``fmt`` checked, or the detected format when ``fmt`` is None."""
    if fmt is None:
        return detect_price_format(path)
    try:
        return PriceFormat(fmt)
    except ValueError:
        raise TraceError(str(path), f"unknown format {fmt!r}",
                         f"choose one of {', '.join(f.value for f in PriceFormat)}") from None


def read_price_file(path: str | Path, fmt: PriceFormat | str | None = None) -> tuple[list[PriceRecord], list[PriceProblem]]:
    """Read a price file of any supported format into records and the problems met.

    The records keep the file's order (the store reports out-of-order points from it).
    """
    path = Path(path)
    chosen = resolve_format(path, fmt)
    reader, key_of, by_line = _READERS[chosen]
    imported = reader(path)
    positions = _positions(path, chosen, imported)
    records = [
        PriceRecord(key_of(p), p.timestamp, p.price_usd_per_hour, str(path),
                    line=where if by_line else None, record=None if by_line else where)
        for p, where in zip(imported.points, positions, strict=True)
    ]
    return records, list(imported.problems)


def _positions(path: Path, fmt: PriceFormat, imported: PriceImport) -> list[int]:
    """Where each point came from (file line, or JSON record number).

    The readers do not keep it, so it is re-derived: they skip exactly the
    records they report, in file order; an Azure line holds one date.
    """
    if fmt is PriceFormat.AZURE_CSV:
        line_of_day: dict[datetime, int] = {}
        for line, row in _csv_rows(path):
            try:
                line_of_day.setdefault(parse_azure_date(row.get("Date") or ""), line)
            except ValueError:
                continue
        return [line_of_day.get(p.timestamp, 0) for p in imported.points]
    if fmt is PriceFormat.AWS_CSV:
        skipped = {p.line for p in imported.problems}
        return [line for line, _ in _csv_rows(path) if line not in skipped]
    skipped = {p.record for p in imported.problems}
    out: list[int] = []
    record = 0
    for _ in imported.points:
        record += 1
        while record in skipped:
            record += 1
        out.append(record)
    return out


def _csv_rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        return [(reader.line_num, row) for row in reader]
