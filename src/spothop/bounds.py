"""One validation vocabulary for numbers that come from outside: finite, bounded, with units.

Every edge that takes a number from a user or a file — command-line options,
world and job files, catalog and price importers — checks it against a named
:class:`Bound`, so a bad value is refused with the field, the value and the
range, in the same words everywhere::

    LEAD_TIME_S.check(value, "notice_lead_time_s")
    # ValueOutOfRange: notice_lead_time_s must be between 0 and 86400 s, got nan

Pydantic models use the same bounds through :meth:`Bound.annotated`; typer
options through :meth:`Bound.option_callback`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Annotated, Any, TypeVar

from spothop.errors import ValueOutOfRange

SECONDS_PER_DAY = 86_400
_When = TypeVar("_When", bound=date)


@dataclass(frozen=True)
class Bound:
    """A closed (or half-open, with ``low_open``) range of finite numbers, with its unit."""

    low: float
    high: float
    unit: str = ""
    low_open: bool = False  # True: ``low`` itself is refused (a speed, an interval must be > 0)
    integer: bool = False

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        low = _fmt(self.low)
        if self.low_open:
            return f"greater than {low} and at most {_fmt(self.high)}{unit}"
        return f"between {low} and {_fmt(self.high)}{unit}"

    def check(self, value: Any, field: str) -> Any:
        """``value`` if it is a finite number in range (an int where ``integer``); else
        :class:`ValueOutOfRange` naming ``field``, the value and the range."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueOutOfRange(field, value, f"must be a number {self.describe()}")
        if self.integer and not (isinstance(value, int) or float(value).is_integer()):
            raise ValueOutOfRange(field, value, f"must be a whole number {self.describe()}")
        number = float(value)
        if (
            not math.isfinite(number)
            or number < self.low
            or number > self.high
            or (self.low_open and number <= self.low)
        ):
            raise ValueOutOfRange(field, value, f"must be {self.describe()}")
        return int(number) if self.integer else value

    def annotated(self, field: str) -> Any:
        """A pydantic validator for this bound (``Annotated[float, BOUND.annotated("x")]``)."""
        # Imported here: the on-instance agent checks its options against these bounds without pydantic.
        from pydantic import AfterValidator

        return AfterValidator(lambda value: self.check(value, field))

    def option_callback(self, field: str) -> Callable[[Any], Any]:
        """A typer/click option callback: ``None`` passes (an unset option), anything else is checked."""

        def callback(value: Any) -> Any:
            return None if value is None else self.check(value, field)

        return callback


def _fmt(number: float) -> str:
    return f"{int(number)}" if float(number).is_integer() and abs(number) < 1e15 else f"{number:g}"


# Named bounds: the ranges a demanding user would call "plausible", with their reasons.
LEAD_TIME_S = Bound(0, SECONDS_PER_DAY, "s")  # no cloud gives more than a day's notice
POLL_INTERVAL_S = Bound(0, 60, "s", low_open=True)  # slower than a minute would miss a 30 s notice
DURATION_S = Bound(0, 365 * SECONDS_PER_DAY, "s")  # timeouts, delays, outages: at most a year
PRICE_USD_PER_HOUR = Bound(0, 10_000, "USD per hour")  # the dearest instance lists at ~USD 100/h
GPU_COUNT = Bound(
    0, 64, "GPUs", integer=True
)  # the catalog's largest instance has 16; room to grow
SPEED = Bound(0, 100_000, "simulated seconds per wall second", low_open=True)
PERCENT = Bound(0, 100, "%")
# The resource model (catalog rows, currency rates, `spothop offers`):
INSTANCE_GPU_COUNT = Bound(
    1, 64, "GPUs", integer=True
)  # as GPU_COUNT, and an offering has at least one
USD_PER_GPU_HOUR = Bound(
    0, 200, "USD per GPU-hour", low_open=True
)  # no cloud charges more; above is a monthly price
PRICE_ORIGINAL_PER_HOUR = Bound(
    0, 10_000_000, "per hour in its currency", low_open=True
)  # USD 10k/h in JPY or KRW
VCPUS = Bound(
    0, 4096, "vCPUs", low_open=True
)  # the largest instances (AWS u7in, 896 vCPUs) with room to grow
MEMORY_GIB = Bound(0, 65_536, "GiB", low_open=True)  # 64 TiB: AWS's largest (u7in-32tb) is 32 TiB
GPU_MEMORY_GIB = Bound(0, 4_096, "GiB")  # per GPU: the largest (MI355X) has 288 GB
DISK_GIB = Bound(0, 1_048_576, "GiB")  # 1 PiB of local disk
NETWORK_GBPS = Bound(0, 100_000, "Gbps", low_open=True)  # p5's EFA is 3,200 Gbps
TFLOPS = Bound(0, 100_000, "TFLOPS")  # per GPU: B200 dense FP8 is ~4,500
USD_PER_CURRENCY_UNIT = Bound(
    0, 1_000, "USD per unit", low_open=True
)  # the dearest unit (KWD) is ~3.3 USD
# Market traces:
TRACE_TICK_S = Bound(0, SECONDS_PER_DAY, "s", low_open=True)  # published traces tick every 30-600 s
TRACE_SPAN_S = DURATION_S  # a trace is sampled tick by tick: a year of minutes is 525,600 ticks
INSTANCE_COUNT = Bound(
    0, 1_000_000, "instances", integer=True
)  # obtainable in one market; fleets are thousands
HOURS = Bound(
    0, 365 * 24, "h"
)  # hours of work, a deadline, an overhead: at most a year, as DURATION_S
USD_PER_GPU_HOUR_RATE = Bound(
    0, 200, "USD per GPU-hour"
)  # as USD_PER_GPU_HOUR, and 0 (a free pool) allowed
FLEET_GPUS = Bound(
    0, 1_000_000, "GPUs", integer=True
)  # GPUs in use at once: the largest fleets hold ~10^5
YEAR_FIRST, YEAR_LAST = (
    2006,
    2100,
)  # EC2 opened in 2006; nothing spothop reads is dated later than 2100
UNIX_S = Bound(
    datetime(YEAR_FIRST, 1, 1, tzinfo=UTC).timestamp(),
    datetime(YEAR_LAST, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp(),
    "unix seconds",
)


def check_datetime(value: _When, field: str) -> _When:
    """A date (or datetime) between 2006 and 2100 (naive dates are read as UTC), else :class:`ValueOutOfRange`."""
    if not YEAR_FIRST <= value.year <= YEAR_LAST:
        raise ValueOutOfRange(
            field, value.isoformat(), f"must be a date between {YEAR_FIRST} and {YEAR_LAST}"
        )
    return value


def __getattr__(name: str) -> Any:
    # Pydantic aliases are built on first use: importing the bounds must not load pydantic (the
    # on-instance agent checks its options against them and imports only the standard library).
    if name == "LeadTimeS":
        return Annotated[float, LEAD_TIME_S.annotated("lead time")]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
