"""Azure low-priority price tables: one row per day, one column per VM size.

The shared data (``prices/azure-low-priority-2020/us_east.csv``) looks like::

    Date,NC12,NC12s v2,...,NC6s v3
    2/24/2020,$0.24552,$0.54482,...,$0.60313

Each cell is the low-priority price in USD per instance-hour for that day; an
empty cell means the region did not sell that size then (not an error). Sizes
are written as Azure's portal shows them ("NC6s v3"); they are stored as the
API spells them (``Standard_NC6s_v3``), the name every other spothop part
uses. Azure prices a whole region alike, so each :class:`PricePoint` carries
the region (from the file name, :func:`azure_region_from_file`) and no zone,
and ``product`` is ``"low-priority"``. A date's price holds from 00:00 UTC.
"""

from __future__ import annotations

import csv
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Literal

from spothop.market.errors import TraceError, require_file
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_history import (
    PriceImport,
    PricePoint,
    PriceProblem,
    parse_price_usd_per_hour,
)
from spothop.market.sources.base import FileHead, PriceSource
from spothop.resources.market_id import REGIONAL, MarketId

PROVIDER = "azure"
AZURE_LOW_PRIORITY_PRODUCT = "low-priority"
_DATE_COLUMN = "Date"
# Azure region names put the geography last ("eastus", "northcentralus"); the
# dataset's file names put it first ("us_east.csv", "us_north_central.csv").
_GEOGRAPHY_PREFIXES = frozenset(
    {"us", "europe", "asia", "australia", "brazil", "canada", "japan", "uk", "india", "korea"}
)


def azure_size_name(column: str) -> str:
    """``"NC6s v3"`` → ``"Standard_NC6s_v3"`` (the API's spelling); API names pass through."""
    name = column.strip()
    if name.startswith("Standard_"):
        return name
    return "Standard_" + re.sub(r"\s+", "_", name)


def azure_region_from_file(path: Path) -> str:
    """``us_north_central.csv`` → ``northcentralus``; an Azure name (``eastus.csv``) passes through."""
    parts = [p for p in re.split(r"[_\-\s]+", path.stem.lower()) if p]
    if len(parts) > 1 and parts[0] in _GEOGRAPHY_PREFIXES:
        parts = [*parts[1:], parts[0]]
    return "".join(parts)


def parse_azure_date(cell: str) -> datetime:
    for pattern in ("%m/%d/%Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(cell.strip(), pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unparsable date {cell!r} (expected M/D/YYYY or YYYY-MM-DD)")


def read_azure_low_priority_csv(path: str | Path, region: str | None = None) -> PriceImport:
    """Read a daily Azure low-priority price table (see the module docstring).

    ``region`` defaults to the one the file name implies. Bad cells (a
    non-number, a price of 0 or less, an unparsable date, a repeated date) are
    reported with their line and column; the rest of the file is imported.
    """
    path = Path(path)
    require_file(path)
    region = region or azure_region_from_file(path)
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        if _DATE_COLUMN not in header or len(header) < 2:
            raise TraceError(
                str(path),
                "header lacks 'Date' and VM size columns",
                "expected 'Date,NC6,NC6s v3,...' (one column per VM size)",
            )
        rows = [(reader.line_num, row) for row in reader]
    points: list[PricePoint] = []
    problems: list[PriceProblem] = []
    seen: dict[datetime, int] = {}
    for line, row in rows:
        try:
            day = parse_azure_date(row.get(_DATE_COLUMN) or "")
        except ValueError as exc:
            problems.append(PriceProblem(path=str(path), line=line, reason=str(exc)))
            continue
        if day in seen:
            problems.append(
                PriceProblem(path=str(path), line=line, reason=f"duplicate of line {seen[day]}")
            )
            continue
        seen[day] = line
        for column in header:
            cell = row.get(column) or ""
            if column == _DATE_COLUMN or not cell.strip():
                continue  # an empty cell: the size was not sold there that day
            try:
                price = parse_price_usd_per_hour(cell)
            except ValueError as exc:
                problems.append(
                    PriceProblem(path=str(path), line=line, reason=f"column {column!r}: {exc}")
                )
                continue
            points.append(
                PricePoint(
                    timestamp=day,
                    region=region,
                    zone=REGIONAL,
                    instance_type=azure_size_name(column),
                    product=AZURE_LOW_PRIORITY_PRODUCT,
                    price_usd_per_hour=price,
                    line=line,
                )
            )
    return PriceImport(points, problems)


class AzureLowPriorityCsv(PriceSource):
    """The daily low-priority table above; regional prices, the region from the file name."""

    name: ClassVar[str] = "azure-csv"
    description: ClassVar[str] = (
        "Azure low-priority daily table (Date,NC6,NC6s v3,...), region from the file name"
    )
    provider: ClassVar[str] = PROVIDER
    positions: ClassVar[Literal["line", "record"]] = "line"

    def detect(self, head: FileHead) -> bool:
        columns = head.csv_columns
        return len(columns) > 1 and columns[0] == _DATE_COLUMN

    def read(self, path: Path) -> PriceImport:
        return read_azure_low_priority_csv(path)

    def key(self, point: PricePoint) -> PriceSeriesKey:
        return PriceSeriesKey(
            MarketId(PROVIDER, point.region, REGIONAL, point.instance_type),
            spot=True,
            product=point.product,
        )


SOURCES = (AzureLowPriorityCsv(),)
