"""Spot price history importers (AWS ``describe-spot-price-history``) and price series.

An importer never gives up on a file for one bad record: each bad line is
reported as a :class:`PriceProblem` (where, why) and the rest are imported.
Only a file that cannot be read at all (missing, no header, wrong shape)
raises :class:`TraceError`.
"""

from __future__ import annotations

import csv
import json
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from spothop.market.availability import FloatArray
from spothop.market.errors import TraceError

AWS_CSV_COLUMNS = (
    "Timestamp",
    "AvailabilityZone",
    "InstanceType",
    "ProductDescription",
    "SpotPrice",
)


class PricePoint(BaseModel):
    """One spot price record: from ``timestamp`` (UTC) on, this market costs this much."""

    model_config = ConfigDict(frozen=True)

    timestamp: datetime
    zone: str
    instance_type: str
    product: str
    price_usd_per_hour: float = Field(gt=0, allow_inf_nan=False)


class PriceProblem(BaseModel):
    """One record that was not imported: ``line`` is the file line (CSV) or the
    1-based record number (JSON, where ``record`` is set instead)."""

    model_config = ConfigDict(frozen=True)

    path: str
    line: int | None = None
    record: int | None = None
    reason: str

    def __str__(self) -> str:
        where = (
            f"{self.path}:{self.line}"
            if self.line is not None
            else f"{self.path} record {self.record}"
        )
        return f"{where}: {self.reason}"


class PriceImport(NamedTuple):
    """What an importer returns: the points it could read, and why it skipped the rest."""

    points: list[PricePoint]
    problems: list[PriceProblem]


def _parse_time(text: str) -> datetime:
    """An ISO-8601 time; a time without a zone is taken as UTC (AWS always writes Z)."""
    stamp = datetime.fromisoformat(text.strip())
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def _point(fields: Mapping[str, Any]) -> PricePoint:
    """Build a point or raise ValueError with a short reason."""
    missing = [k for k in AWS_CSV_COLUMNS if not str(fields.get(k) or "").strip()]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    try:
        stamp = _parse_time(str(fields["Timestamp"]))
    except ValueError:
        raise ValueError(f"unparsable time {fields['Timestamp']!r}") from None
    try:
        price = float(fields["SpotPrice"])
    except (TypeError, ValueError):
        raise ValueError(f"bad number {fields['SpotPrice']!r} for SpotPrice") from None
    if not math.isfinite(price):
        raise ValueError(f"bad number {fields['SpotPrice']!r} for SpotPrice")
    if price <= 0:
        raise ValueError(f"price {price} <= 0")
    return PricePoint(
        timestamp=stamp,
        zone=str(fields["AvailabilityZone"]).strip(),
        instance_type=str(fields["InstanceType"]).strip(),
        product=str(fields["ProductDescription"]).strip(),
        price_usd_per_hour=price,
    )


def _collect(
    path: Path, records: Iterable[tuple[int, Mapping[str, Any]]], by_line: bool
) -> PriceImport:
    points: list[PricePoint] = []
    problems: list[PriceProblem] = []
    seen: dict[tuple[datetime, str, str, str], int] = {}

    def problem(where: int, reason: str) -> None:
        problems.append(
            PriceProblem(
                path=str(path),
                line=where if by_line else None,
                record=None if by_line else where,
                reason=reason,
            )
        )

    for where, fields in records:
        try:
            point = _point(fields)
        except ValueError as exc:
            problem(where, str(exc))
            continue
        key = (point.timestamp, point.zone, point.instance_type, point.product)
        if key in seen:
            problem(where, f"duplicate of {'line' if by_line else 'record'} {seen[key]}")
            continue
        seen[key] = where
        points.append(point)
    return PriceImport(points, problems)


def read_aws_price_history_csv(path: str | Path) -> PriceImport:
    """Read a CSV with columns ``Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice``.

    Column order does not matter; extra columns are ignored. A record repeating
    an earlier one's (time, zone, type, product) is reported as a duplicate.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(str(path), "no such file", "check the path")
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        absent = [c for c in AWS_CSV_COLUMNS if c not in header]
        if absent:
            raise TraceError(
                str(path),
                f"header lacks {', '.join(absent)}",
                f"the header must name {','.join(AWS_CSV_COLUMNS)}",
            )
        rows = [(reader.line_num, row) for row in reader]
    return _collect(path, rows, by_line=True)


def read_aws_price_history_json(path: str | Path) -> PriceImport:
    """Read the AWS CLI's ``describe-spot-price-history`` output as-is (``{"SpotPriceHistory": [...]}``)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(str(path), "no such file", "check the path")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(
            str(path), f"not valid JSON ({exc})", "pass the CLI's JSON output"
        ) from exc
    history = doc.get("SpotPriceHistory") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise TraceError(
            str(path),
            "key 'SpotPriceHistory' missing or not a list",
            "pass `aws ec2 describe-spot-price-history` JSON output",
        )
    records = [(i, r if isinstance(r, dict) else {}) for i, r in enumerate(history, start=1)]
    return _collect(path, records, by_line=False)


@dataclass(frozen=True, eq=False)
class PriceSeries:
    """A price as a step function of the offset into a market (seconds).

    ``price_usd_per_hour[i]`` holds from ``offsets_s[i]`` until the next offset;
    ``offsets_s[0]`` must be 0. Offsets past ``duration_s`` wrap around, like an
    :class:`~spothop.market.availability.AvailabilityTrace`. Lookups use bisect.
    """

    offsets_s: FloatArray
    price_usd_per_hour: FloatArray
    duration_s: float
    _offsets: list[float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets_s, dtype=np.float64).copy()
        prices = np.asarray(self.price_usd_per_hour, dtype=np.float64).copy()
        if offsets.ndim != 1 or offsets.size == 0 or offsets.shape != prices.shape:
            raise ValueError("PriceSeries needs equal-length, non-empty offsets and prices")
        if offsets[0] != 0 or np.any(np.diff(offsets) <= 0) or not self.duration_s > offsets[-1]:
            raise ValueError(
                "PriceSeries offsets must start at 0, increase, and end before duration_s"
            )
        if not np.all(np.isfinite(prices)) or np.any(prices <= 0):
            raise ValueError("PriceSeries prices must be finite and > 0")
        for array in (offsets, prices):
            array.setflags(write=False)
        object.__setattr__(self, "offsets_s", offsets)
        object.__setattr__(self, "price_usd_per_hour", prices)
        object.__setattr__(self, "_offsets", offsets.tolist())

    @classmethod
    def regular(cls, tick_s: float, prices_usd_per_hour: Iterable[float]) -> PriceSeries:
        """One price per tick of ``tick_s`` seconds."""
        prices = np.asarray(list(prices_usd_per_hour), dtype=np.float64)
        return cls(np.arange(prices.size, dtype=np.float64) * tick_s, prices, prices.size * tick_s)

    @classmethod
    def from_points(
        cls, points: Iterable[PricePoint], start: datetime, duration_s: float
    ) -> PriceSeries:
        """Replay one market's price history from ``start`` for ``duration_s`` seconds.

        The price at ``start`` is the last point at or before it (else the first
        point after it). Pass points of one zone, instance type and product.
        """
        ordered = sorted(points, key=lambda p: p.timestamp)
        if not ordered:
            raise ValueError("PriceSeries.from_points needs at least one point")
        offsets = [(p.timestamp - start).total_seconds() for p in ordered]
        first = max(0, bisect_right(offsets, 0.0) - 1)
        kept = [
            (max(o, 0.0), p.price_usd_per_hour)
            for o, p in zip(offsets[first:], ordered[first:], strict=True)
            if o < duration_s
        ]
        if not kept:
            raise ValueError("PriceSeries.from_points: no point falls before start + duration_s")
        steps: dict[float, float] = {}
        for offset, price in kept:
            steps[offset] = price  # the later record at the same offset wins
        steps[0.0] = steps.get(0.0, kept[0][1])
        keys = sorted(steps)
        return cls(np.asarray(keys), np.asarray([steps[k] for k in keys]), duration_s)

    def price_at(self, offset_s: float) -> float:
        """The price at ``offset_s`` (≥ 0, wrapping past ``duration_s``)."""
        if offset_s < 0 or not math.isfinite(offset_s):
            raise ValueError(f"price offset must be finite and >= 0, got {offset_s}")
        local = offset_s % self.duration_s
        return float(self.price_usd_per_hour[bisect_right(self._offsets, local) - 1])
