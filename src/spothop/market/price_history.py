"""Price history as read from files, and price series as step functions of time.

The readers of each file format live in :mod:`spothop.market.sources`; what
they return is defined here. A reader never gives up on a file for one bad
record: each bad record is reported as a :class:`PriceProblem` (where, why)
and the rest are imported. Only a file that cannot be read at all (missing,
no header, wrong shape) raises :class:`~spothop.market.errors.TraceError`.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from spothop.bounds import PRICE_USD_PER_HOUR
from spothop.market.availability import FloatArray


class PricePoint(BaseModel):
    """One spot price record: from ``timestamp`` (UTC) on, this market costs this much.

    ``zone`` is the zone as the file spells it (``""`` for a regional price);
    ``region`` is set when the file names the region itself, else the
    source's key derives it from the zone. ``line`` (a text file's line) or
    ``record`` (a JSON record's 1-based number) says where the point was read.
    """

    model_config = ConfigDict(frozen=True)

    timestamp: datetime
    zone: str
    instance_type: str
    product: str
    price_usd_per_hour: float = Field(gt=0, allow_inf_nan=False)
    region: str = ""
    line: int | None = None
    record: int | None = None


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


def parse_price_usd_per_hour(cell: object, column: str = "") -> float:
    """A price cell (``"0.9"``, ``"$1,024.50"``) as a finite number > 0 and at most
    :data:`spothop.bounds.PRICE_USD_PER_HOUR`'s maximum, else ValueError with a short reason
    (naming ``column`` when given): a price of 1e300 is a typo, and stored it would lead every
    view and forecast of its series."""
    text = str(cell if cell is not None else "").strip().replace("$", "").replace(",", "")
    bad = f"bad number {cell!r}" + (f" for {column}" if column else "")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(bad) from None
    if not math.isfinite(value):
        raise ValueError(bad)
    if value <= 0:
        raise ValueError(f"price {value} <= 0")
    return float(PRICE_USD_PER_HOUR.check(value, column or "price"))


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
    # The offsets for bisect: an array of doubles, which the garbage collector does not track
    # (a list of 8,640 floats was 8,640 references every full collection walked, in every market
    # of every process holding the providers: the server's full collections took ~40 ms).
    _offsets: array[float] = field(init=False, repr=False)

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
        for values in (offsets, prices):
            values.setflags(write=False)
        object.__setattr__(self, "offsets_s", offsets)
        object.__setattr__(self, "price_usd_per_hour", prices)
        object.__setattr__(self, "_offsets", array("d", offsets.tobytes()))

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
