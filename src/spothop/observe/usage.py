"""Reserved capacity from a GPU-usage curve: the baseline that minimises total cost.

The input is a CSV of ``time,gpus`` rows (a header line first): ``time`` is
an ISO 8601 timestamp or unix seconds, ``gpus`` the GPUs in use from that
time until the next row (the last row's level is held for the median step).
A bad row raises :class:`~spothop.errors.ConfigError` naming its line and column.

For a reserved baseline of ``r`` GPUs, over the curve's duration ``T``:

    cost(r) = r · T · reserved_price + Σ max(0, gpus(t) − r) · dt · peak_price

(reserved GPUs are paid whether used or not; the peaks above them go to spot
or on-demand at ``peak_price``). ``cost`` is convex and piecewise linear in
``r``, so its minimum lies at one of the curve's levels: every level from 0
to the peak is tried (:func:`best_baseline`). Compared against all on-demand
(``r = 0`` at the on-demand price) and all reserved (``r`` = the peak).
Money in integer micro-dollars.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from spothop.bounds import FLEET_GPUS, USD_PER_GPU_HOUR_RATE
from spothop.errors import ConfigError, NotFoundError

SECONDS_PER_HOUR = 3600.0


# A usage CSV that cannot be read is bad input (exit 2): its message names the line and column.
UsageError = ConfigError


@dataclass(frozen=True)
class UsageCurve:
    times_unix_s: tuple[float, ...]
    gpus: tuple[int, ...]

    @property
    def durations_s(self) -> tuple[float, ...]:
        """How long each row's level holds (the last one: the median step, or 1 h alone)."""
        steps = [b - a for a, b in zip(self.times_unix_s, self.times_unix_s[1:], strict=False)]
        if steps:
            ordered = sorted(steps)
            last = ordered[len(ordered) // 2]
        else:
            last = SECONDS_PER_HOUR
        return (*steps, last)

    @property
    def duration_s(self) -> float:
        return sum(self.durations_s)

    @property
    def peak(self) -> int:
        return max(self.gpus)


def _time(value: str, line: int) -> float:
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"usage CSV line {line}, column time: {value!r} is neither an ISO 8601 time "
            "nor unix seconds"
        ) from None
    if parsed.tzinfo is None:
        raise UsageError(
            f"usage CSV line {line}, column time: {value!r} has no time zone "
            "(write it as 2026-01-01T00:00:00Z or with an offset)"
        )
    return parsed.timestamp()


def parse_usage(text: str, source: str = "usage CSV") -> UsageCurve:
    """The curve in ``text`` (module docstring); :class:`UsageError` on the first bad row."""
    reader = csv.reader(io.StringIO(text))
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise UsageError(f"{source} line {reader.line_num}: not CSV ({exc})") from None
    if not rows:
        raise UsageError(f"{source} is empty: expected a header line 'time,gpus' and rows")
    header = [h.strip().lower() for h in rows[0]]
    if "time" not in header or "gpus" not in header:
        raise UsageError(
            f"{source} line 1: the header must name the columns time and gpus, got {rows[0]!r}"
        )
    ti, gi = header.index("time"), header.index("gpus")
    times: list[float] = []
    gpus: list[int] = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) <= max(ti, gi):
            missing = "time" if len(row) <= ti else "gpus"
            raise UsageError(f"{source} line {line}, column {missing}: missing")
        t = _time(row[ti], line)
        try:
            g = float(row[gi].strip())
        except ValueError:
            raise UsageError(
                f"{source} line {line}, column gpus: {row[gi]!r} is not a number of GPUs"
            ) from None
        if not (g >= 0 and math.isfinite(g) and g == int(g)):
            raise UsageError(
                f"{source} line {line}, column gpus: {row[gi]!r} must be a whole number ≥ 0"
            )
        if g > FLEET_GPUS.high:  # the cost of each level is summed over the rows: bounded work
            raise UsageError(
                f"{source} line {line}, column gpus: {row[gi]!r} GPUs at once is past any fleet; "
                f"give at most {FLEET_GPUS.high:,.0f}"
            )
        if times and t <= times[-1]:
            raise UsageError(
                f"{source} line {line}, column time: {row[ti]!r} is not after the row before "
                "(rows must be in time order)"
            )
        times.append(t)
        gpus.append(int(g))
    if not times:
        raise UsageError(f"{source} has a header but no rows")
    return UsageCurve(tuple(times), tuple(gpus))


def load_usage(path: Path) -> UsageCurve:
    if not path.exists():
        raise NotFoundError(f"the usage CSV {path} does not exist; give a CSV of time,gpus rows")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a text file"
        raise UsageError(f"cannot read the usage CSV {path}: {why}") from None
    return parse_usage(text, str(path))


@dataclass(frozen=True)
class Plan:
    name: str
    reserved_gpus: int
    cost_microusd: int
    reserved_microusd: int
    peak_microusd: int
    utilisation: float  # share of the reserved GPU-hours used

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reserved_gpus": self.reserved_gpus,
            "cost_microusd": self.cost_microusd,
            "cost_usd": self.cost_microusd / 1e6,
            "reserved_microusd": self.reserved_microusd,
            "peak_microusd": self.peak_microusd,
            "reserved_utilisation": self.utilisation,
        }


def plan_cost(
    curve: UsageCurve, reserved: int, reserved_price: float, peak_price: float, name: str = ""
) -> Plan:
    """The cost of ``reserved`` GPUs held throughout, the rest at ``peak_price`` (USD per GPU-hour)."""
    hours = [d / SECONDS_PER_HOUR for d in curve.durations_s]
    total_h = sum(hours)
    reserved_usd = reserved * total_h * reserved_price
    over_usd = sum(max(0, g - reserved) * h for g, h in zip(curve.gpus, hours, strict=True))
    used = sum(min(g, reserved) * h for g, h in zip(curve.gpus, hours, strict=True))
    r_micro = round(reserved_usd * 1e6)
    p_micro = round(over_usd * peak_price * 1e6)
    return Plan(
        name or f"{reserved} reserved",
        reserved,
        r_micro + p_micro,
        r_micro,
        p_micro,
        used / (reserved * total_h) if reserved and total_h else 0.0,
    )


@dataclass(frozen=True)
class UsageAdvice:
    best: Plan
    all_on_demand: Plan
    all_reserved: Plan
    all_peak: Plan | None
    reserved_price: float
    on_demand_price: float
    peak_price: float
    peak_market: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.best.to_dict(),
            "all_on_demand": self.all_on_demand.to_dict(),
            "all_reserved": self.all_reserved.to_dict(),
            "all_peak_market": self.all_peak.to_dict() if self.all_peak else None,
            "reserved_usd_per_gpu_hour": self.reserved_price,
            "on_demand_usd_per_gpu_hour": self.on_demand_price,
            "peak_usd_per_gpu_hour": self.peak_price,
            "peak_market": self.peak_market,
        }


def best_baseline(
    curve: UsageCurve,
    *,
    reserved_price: float,
    on_demand_price: float,
    spot_price: float | None = None,
) -> UsageAdvice:
    """The reserved level minimising total cost, the peaks on spot (if priced) else on-demand."""
    for name, value in (
        ("--reserved-price", reserved_price),
        ("--on-demand-price", on_demand_price),
        ("--spot-price", spot_price),
    ):
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise ConfigError(f"{name} must be a non-negative USD per GPU-hour, got {value}")
        if value is not None:
            USD_PER_GPU_HOUR_RATE.check(value, name)  # a finite cost, in micro-dollars
    peak_price = spot_price if spot_price is not None else on_demand_price
    market = "spot" if spot_price is not None else "on-demand"
    # The cost is piecewise linear in the reserved level, bending only at a level some row uses:
    # the cheapest level is one of those (or none), so only they are priced, not every level up
    # to the peak (a peak of a million GPUs was a million plans over every row).
    plans = [
        plan_cost(curve, r, reserved_price, peak_price, f"{r} reserved + {market} peaks")
        for r in sorted({0, *curve.gpus})
    ]
    best = min(plans, key=lambda p: (p.cost_microusd, p.reserved_gpus))
    return UsageAdvice(
        best=best,
        all_on_demand=plan_cost(curve, 0, reserved_price, on_demand_price, "all on-demand"),
        all_reserved=plan_cost(curve, curve.peak, reserved_price, peak_price, "all reserved"),
        all_peak=plans[0] if spot_price is not None else None,
        reserved_price=reserved_price,
        on_demand_price=on_demand_price,
        peak_price=peak_price,
        peak_market=market,
    )
