"""Spot price forecasts over 1 h, 6 h and 24 h, chosen per series by rolling-origin validation.

Method
------
A price history is a step function (a price holds until the next point). It
is sampled on the hour: ``y[t]`` is the price in force at hour ``t``. For a
horizon of ``h`` hours the candidates forecasting ``y[t+h]`` from ``y[..t]`` are

- ``naive``: ``y[t]``, the last price;
- ``trend-k`` (k = 12, 24, 48 h): a damped local trend
  ``y[t] + s·Σ_{i=1..h} φ^i`` with slope ``s = (y[t] − y[t−k]) / k`` and
  ``φ`` = 1 (plain) or 0.9 (damped). Spot prices on AWS since the 2017 pricing
  change drift in small steps every few hours, often for days in one
  direction, which is what a local trend captures;
- ``mean-24``: the mean price of the last 24 h (a mean-reverting level).

At each forecast origin the candidate with the lowest mean absolute error over
the **past week of forecasts whose outcome is already known** (origins
``t−h−167 … t−h``) is used, but only if it beats ``naive`` there by at least
:data:`SELECTION_MARGIN`; otherwise the forecast *is* the naive one and says
so (``method == "naive"``, ``fell_back``). So the model never silently
replaces the last price: it must first have earned it on this very series.

The backtest (:func:`backtest_series`) walks the same rule over the last
:data:`TEST_FRACTION` of each series and reports MAE and MAPE against naive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

HORIZONS_H = (1, 6, 24)
GRID_S = 3600  # prices sampled on the hour: the shortest horizon asked for
SELECTION_WINDOW_H = 168  # one week of past forecasts judges the candidates (weekly demand cycle)
# A candidate replaces naive only when it beat naive by 5 % MAE over the window:
# below that the difference is noise from one or two price steps.
SELECTION_MARGIN = 0.05
TEST_FRACTION = 0.4  # the backtest scores the last 40 % of each series
TREND_WINDOWS_H = (12, 24, 48)
DAMPING = (1.0, 0.9)
MEAN_WINDOW_H = 24
NAIVE = "naive"
_TIE = 1e-9  # relative MAE difference below which two forecasts are equal


def hourly_prices(
    times: Sequence[datetime], prices: Sequence[float]
) -> tuple[datetime, FloatArray]:
    """Sample a step-function price on the hour, from the first whole hour to the last point.

    Returns the first hour and ``y`` (``y[t]`` holds at ``first + t`` hours).
    Times need not be sorted; at equal times the later entry wins.
    """
    order = sorted(range(len(times)), key=lambda i: times[i])
    stamps = np.asarray([times[i].timestamp() for i in order])
    values = np.asarray([prices[i] for i in order], dtype=np.float64)
    start = float(np.ceil(stamps[0] / GRID_S) * GRID_S)
    grid = np.arange(start, stamps[-1] + 1, GRID_S)
    if grid.size == 0:  # all points within one hour: the price at its end
        grid = np.asarray([start])
    index = np.searchsorted(stamps, grid, side="right") - 1
    return datetime.fromtimestamp(start, tz=UTC), values[np.maximum(index, 0)]


def candidate_forecasts(y: FloatArray, horizon_h: int) -> dict[str, FloatArray]:
    """Every candidate's forecast of ``y[t + horizon_h]`` made at each origin ``t``."""
    out: dict[str, FloatArray] = {NAIVE: y.copy()}
    for k in TREND_WINDOWS_H:
        slope = np.zeros_like(y)
        slope[k:] = (y[k:] - y[:-k]) / k
        for phi in DAMPING:
            reach = sum(phi**i for i in range(1, horizon_h + 1))
            out[f"trend-{k}" + ("" if phi == 1.0 else f"-d{phi:g}")] = y + slope * reach
    csum = np.concatenate([[0.0], np.cumsum(y)])
    t = np.arange(y.size)
    low = np.maximum(0, t - MEAN_WINDOW_H + 1)
    out[f"mean-{MEAN_WINDOW_H}"] = (csum[t + 1] - csum[low]) / (t + 1 - low)
    return out


def _choose(
    errors: dict[str, FloatArray], cumulative: dict[str, FloatArray], origin: int, horizon_h: int
) -> str:
    """The candidate used at ``origin``: best over the known past window, if it beats naive by the margin."""
    high = origin - horizon_h + 1  # forecasts made at s <= origin − h have known outcomes
    low = max(0, high - SELECTION_WINDOW_H)
    if high <= low:
        return NAIVE
    scores = {name: float(c[high] - c[low]) for name, c in cumulative.items()}
    best = min(scores, key=lambda name: scores[name])
    if scores[best] < scores[NAIVE] * (1 - SELECTION_MARGIN):
        return best
    return NAIVE


@dataclass(frozen=True)
class PriceForecast:
    """A forecast of the price ``horizon_h`` hours after ``origin`` (the last hour of history).

    ``method`` is the candidate used; ``fell_back`` is True when no candidate
    beat naive over the validation window, so the forecast is the last price.
    ``validation_mae`` and ``naive_validation_mae`` are that window's errors (USD/h).
    """

    origin: datetime
    horizon_h: int
    price_usd_per_hour: float
    method: str
    fell_back: bool
    validation_mae: float | None
    naive_validation_mae: float | None

    @property
    def target(self) -> datetime:
        return self.origin + timedelta(hours=self.horizon_h)


def _errors(
    y: FloatArray, horizon_h: int
) -> tuple[dict[str, FloatArray], dict[str, FloatArray], dict[str, FloatArray]]:
    forecasts = candidate_forecasts(y, horizon_h)
    known = y.size - horizon_h
    errors = {n: np.abs(f[:known] - y[horizon_h:]) for n, f in forecasts.items()}
    cumulative = {n: np.concatenate([[0.0], np.cumsum(e)]) for n, e in errors.items()}
    return forecasts, errors, cumulative


def forecast_price(
    times: Sequence[datetime], prices: Sequence[float], horizon_h: int
) -> PriceForecast:
    """Forecast one series' price ``horizon_h`` hours after its last hour (see the module docstring)."""
    if not times or len(times) != len(prices):
        raise ValueError("forecast_price needs equal-length, non-empty times and prices")
    first, y = hourly_prices(times, prices)
    origin = y.size - 1
    forecasts, errors, cumulative = _errors(y, horizon_h)
    method = _choose(errors, cumulative, origin, horizon_h) if y.size > horizon_h else NAIVE
    high = origin - horizon_h + 1
    low = max(0, high - SELECTION_WINDOW_H)
    window = high - low

    def mae(name: str) -> float | None:
        return (
            float(cumulative[name][high] - cumulative[name][low]) / window if window > 0 else None
        )

    return PriceForecast(
        origin=first + timedelta(hours=origin),
        horizon_h=horizon_h,
        price_usd_per_hour=float(forecasts[method][origin]),
        method=method,
        fell_back=method == NAIVE,
        validation_mae=mae(method),
        naive_validation_mae=mae(NAIVE),
    )


@dataclass(frozen=True)
class SeriesBacktest:
    """One series at one horizon over its test span: the rule's errors against naive.

    ``verdict`` is ``"better"``, ``"worse"`` or ``"tie"`` (equal MAE: typically
    a price that did not move, where nothing beats the last price);
    ``model_share`` is the fraction of test origins where a candidate other
    than naive was used; ``moving`` is whether the price changed in the test span.
    """

    name: str
    horizon_h: int
    origins: int
    mae: float
    mape_pct: float
    naive_mae: float
    naive_mape_pct: float
    model_share: float
    moving: bool

    @property
    def verdict(self) -> str:
        scale = max(self.naive_mae, self.mae, 1e-12)
        if abs(self.mae - self.naive_mae) <= _TIE * scale:
            return "tie"
        return "better" if self.mae < self.naive_mae else "worse"


def backtest_series(
    name: str,
    times: Sequence[datetime],
    prices: Sequence[float],
    horizon_h: int,
    test_fraction: float = TEST_FRACTION,
) -> SeriesBacktest | None:
    """Walk the selection rule over the last ``test_fraction`` of the series (None if too short)."""
    _, y = hourly_prices(times, prices)
    split = int(y.size * (1 - test_fraction))
    known = y.size - horizon_h
    if split < horizon_h + 1 or known <= split:
        return None
    _, errors, cumulative = _errors(y, horizon_h)
    chosen = [_choose(errors, cumulative, t, horizon_h) for t in range(split, known)]
    model_errors = np.asarray(
        [errors[c][t] for c, t in zip(chosen, range(split, known), strict=True)]
    )
    naive_errors = errors[NAIVE][split:known]
    actual = y[split + horizon_h :]
    return SeriesBacktest(
        name=name,
        horizon_h=horizon_h,
        origins=known - split,
        mae=float(model_errors.mean()),
        mape_pct=float(100 * np.mean(model_errors / actual)),
        naive_mae=float(naive_errors.mean()),
        naive_mape_pct=float(100 * np.mean(naive_errors / actual)),
        model_share=float(np.mean([c != NAIVE for c in chosen])),
        moving=bool(np.any(np.diff(y[split:]) != 0)),
    )


@dataclass(frozen=True)
class BacktestSummary:
    """All series at one horizon. ``better_share_moving`` counts only series whose price moved."""

    horizon_h: int
    series: int
    moving: int
    better: int
    worse: int
    ties: int
    mae: float
    naive_mae: float
    mape_pct: float
    naive_mape_pct: float

    @property
    def better_share(self) -> float:
        return self.better / self.series if self.series else 0.0

    @property
    def better_share_moving(self) -> float:
        return self.better / self.moving if self.moving else 0.0


def summarise(results: Sequence[SeriesBacktest], horizon_h: int) -> BacktestSummary:
    """Counts and mean errors of one horizon's per-series results."""
    rows = [r for r in results if r.horizon_h == horizon_h]
    verdicts = [r.verdict for r in rows]

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else float("nan")

    return BacktestSummary(
        horizon_h=horizon_h,
        series=len(rows),
        moving=sum(r.moving for r in rows),
        better=verdicts.count("better"),
        worse=verdicts.count("worse"),
        ties=verdicts.count("tie"),
        mae=mean([r.mae for r in rows]),
        naive_mae=mean([r.naive_mae for r in rows]),
        mape_pct=mean([r.mape_pct for r in rows]),
        naive_mape_pct=mean([r.naive_mape_pct for r in rows]),
    )
