"""One price series over a window of time: what ``spothop market prices`` shows for it.

A :class:`PriceWindow` is built from the series' points in the window and its
whole stored history (the forecast looks back further than the window shows);
``to_dict()`` is its JSON form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from spothop.market.forecast import forecast_price
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_store import SECONDS_PER_HOUR, StoredPrice

FORECAST_HORIZON_H = 6  # the table's forecast column: one durable-checkpoint interval or so ahead
# The forecast reads at most this much of a series' history before its last point: four times the
# week its candidates are judged on (forecast.SELECTION_WINDOW_H). The hourly grid it samples is
# then bounded, whatever the store holds (a stray point years away made it walk every hour between).
FORECAST_HISTORY = timedelta(weeks=4)


@dataclass(frozen=True)
class PriceWindow:
    """A series' points in a window: the last, lowest and highest price, and a forecast from its history."""

    series: PriceSeriesKey
    gpu: str | None
    gpu_count: int | None
    points: int
    first: datetime
    last: datetime
    last_usd_per_hour: float
    min_usd_per_hour: float
    max_usd_per_hour: float
    last_usd_per_gpu_second: float | None
    forecast_usd_per_hour: float
    forecast_horizon_h: int
    forecast_method: str
    forecast_fell_back_to_naive: bool

    @classmethod
    def of(
        cls,
        points: Sequence[StoredPrice],
        history: Sequence[StoredPrice],
        horizon_h: int = FORECAST_HORIZON_H,
    ) -> PriceWindow:
        """``points``: the window's, oldest first (at least one); ``history``: every stored point of the series."""
        last = points[-1]
        values = [p.price_usd_per_hour for p in points]
        history = recent(history)
        forecast = forecast_price(
            [p.timestamp for p in history], [p.price_usd_per_hour for p in history], horizon_h
        )
        return cls(
            last.series,
            last.gpu,
            last.gpu_count,
            len(points),
            points[0].timestamp,
            last.timestamp,
            last.price_usd_per_hour,
            min(values),
            max(values),
            last.usd_per_gpu_second,
            forecast.price_usd_per_hour,
            horizon_h,
            forecast.method,
            forecast.fell_back,
        )

    @property
    def last_usd_per_gpu_hour(self) -> float | None:
        per_second = self.last_usd_per_gpu_second
        return None if per_second is None else per_second * SECONDS_PER_HOUR

    def to_dict(self) -> dict[str, Any]:
        market = self.series.market
        return {
            **market.to_dict(),
            "location": market.location,
            "market": self.series.market_kind,
            "product": self.series.product,
            "gpu": self.gpu,
            "gpu_count": self.gpu_count,
            "points": self.points,
            "first": self.first.isoformat(),
            "last": self.last.isoformat(),
            "last_usd_per_hour": self.last_usd_per_hour,
            "min_usd_per_hour": self.min_usd_per_hour,
            "max_usd_per_hour": self.max_usd_per_hour,
            "last_usd_per_gpu_second": self.last_usd_per_gpu_second,
            "last_usd_per_gpu_hour": self.last_usd_per_gpu_hour,
            f"forecast_{self.forecast_horizon_h}h_usd_per_hour": self.forecast_usd_per_hour,
            "forecast_method": self.forecast_method,
            "forecast_fell_back_to_naive": self.forecast_fell_back_to_naive,
        }


def recent(history: Sequence[StoredPrice]) -> Sequence[StoredPrice]:
    """The points of ``history`` within :data:`FORECAST_HISTORY` of its latest (all when empty)."""
    if not history:
        return history
    latest = max(p.timestamp for p in history)
    return [p for p in history if p.timestamp >= latest - FORECAST_HISTORY]
