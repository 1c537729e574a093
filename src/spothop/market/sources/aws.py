"""AWS spot price history: ``describe-spot-price-history`` as CSV or as the CLI's JSON.

Two encodings of the same records::

    Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice     (aws-csv)
    2020-01-01T00:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.918

    {"SpotPriceHistory": [{"Timestamp": ..., "AvailabilityZone": ..., ...}]}  (aws-json)

Prices are per zone; a zone's region is its name without the zone suffix
(:func:`region_of_zone`, AWS's naming: ``us-east-1a`` → ``us-east-1``, Local
Zones ``us-west-2-lax-1a`` → ``us-west-2``). ``ProductDescription`` is kept as
the series' product. A record repeating an earlier one's (time, zone, type,
product) is reported as a duplicate.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

from spothop.market.errors import TraceError, require_file
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_history import (
    PriceImport,
    PricePoint,
    PriceProblem,
    parse_price_usd_per_hour,
)
from spothop.market.sources.base import FileHead, PriceSource
from spothop.resources.market_id import MarketId

PROVIDER = "aws"
COLUMNS = ("Timestamp", "AvailabilityZone", "InstanceType", "ProductDescription", "SpotPrice")
HISTORY_KEY = "SpotPriceHistory"
# A region is geography-direction-number (us-east-1, us-gov-west-1, ap-southeast-2);
# a zone adds a letter, a Local Zone a city and a letter after a dash.
_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)")


def region_of_zone(zone: str) -> str:
    """The AWS region an availability-zone name belongs to (the name itself if it is none)."""
    match = _ZONE.match(zone)
    return match.group(1) if match else zone


def _parse_time(text: str) -> datetime:
    """An ISO-8601 time; a time without a zone is taken as UTC (AWS always writes Z)."""
    stamp = datetime.fromisoformat(text.strip())
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def _point(fields: Mapping[str, Any], where: int, by_line: bool) -> PricePoint:
    """Build a point or raise ValueError with a short reason."""
    missing = [k for k in COLUMNS if not str(fields.get(k) or "").strip()]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    try:
        stamp = _parse_time(str(fields["Timestamp"]))
    except ValueError:
        raise ValueError(f"unparsable time {fields['Timestamp']!r}") from None
    return PricePoint(
        timestamp=stamp,
        zone=str(fields["AvailabilityZone"]).strip(),
        instance_type=str(fields["InstanceType"]).strip(),
        product=str(fields["ProductDescription"]).strip(),
        price_usd_per_hour=parse_price_usd_per_hour(fields["SpotPrice"], "SpotPrice"),
        line=where if by_line else None,
        record=None if by_line else where,
    )


def _collect(
    path: Path, records: Iterable[tuple[int, Mapping[str, Any]]], by_line: bool
) -> PriceImport:
    points: list[PricePoint] = []
    problems: list[PriceProblem] = []
    seen: dict[tuple[datetime, str, str, str], int] = {}
    for where, fields in records:
        try:
            point = _point(fields, where, by_line)
            key = (point.timestamp, point.zone, point.instance_type, point.product)
            if key in seen:
                raise ValueError(f"duplicate of {'line' if by_line else 'record'} {seen[key]}")
        except ValueError as exc:
            problems.append(
                PriceProblem(
                    path=str(path),
                    line=where if by_line else None,
                    record=None if by_line else where,
                    reason=str(exc),
                )
            )
            continue
        seen[key] = where
        points.append(point)
    return PriceImport(points, problems)


class _AwsHistory(PriceSource):
    provider: ClassVar[str] = PROVIDER

    def key(self, point: PricePoint) -> PriceSeriesKey:
        market = MarketId(PROVIDER, region_of_zone(point.zone), point.zone, point.instance_type)
        return PriceSeriesKey(market, spot=True, product=point.product)


class AwsCsv(_AwsHistory):
    """A CSV naming the columns above; their order does not matter, extra columns are ignored."""

    name: ClassVar[str] = "aws-csv"
    description: ClassVar[str] = (
        "AWS spot price history CSV (Timestamp,AvailabilityZone,InstanceType,...)"
    )
    positions: ClassVar[Literal["line", "record"]] = "line"

    def detect(self, head: FileHead) -> bool:
        return all(column in head.csv_columns for column in COLUMNS)

    def read(self, path: Path) -> PriceImport:
        require_file(path)
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            absent = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if absent:
                raise TraceError(
                    str(path),
                    f"header lacks {', '.join(absent)}",
                    f"the header must name {','.join(COLUMNS)}",
                )
            rows = [(reader.line_num, row) for row in reader]
        return _collect(path, rows, by_line=True)


class AwsJson(_AwsHistory):
    """The AWS CLI's ``aws ec2 describe-spot-price-history`` output, as-is."""

    name: ClassVar[str] = "aws-json"
    description: ClassVar[str] = "`aws ec2 describe-spot-price-history` JSON output, as-is"
    positions: ClassVar[Literal["line", "record"]] = "record"

    def detect(self, head: FileHead) -> bool:
        return head.is_json and f'"{HISTORY_KEY}"' in head.text

    def read(self, path: Path) -> PriceImport:
        require_file(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(
                str(path), f"not valid JSON ({exc})", "pass the CLI's JSON output"
            ) from exc
        history = doc.get(HISTORY_KEY) if isinstance(doc, dict) else None
        if not isinstance(history, list):
            raise TraceError(
                str(path),
                f"key '{HISTORY_KEY}' missing or not a list",
                "pass `aws ec2 describe-spot-price-history` JSON output",
            )
        records = [(i, r if isinstance(r, dict) else {}) for i, r in enumerate(history, start=1)]
        return _collect(path, records, by_line=False)


SOURCES = (AwsCsv(), AwsJson())
