"""When to checkpoint: a fixed period, or Young/Daly from save cost and preemption rate.

With checkpoint cost C and mean time between failures (here: preemptions) M,
Young (1974) showed the interval that minimises expected lost work is about
√(2CM); Daly (2006) refined it to
``√(2CM)·(1 + ⅓·√(C/2M) + ⅑·(C/2M)) − C`` for C < 2M, and M otherwise.
Both are re-evaluated on every call, so the interval follows C as saves are
measured and M as the market changes (M may be a callable that asks the
market layer). The default is time-based, every 20 minutes, which is what
practitioners on spot capacity use when they know nothing better.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from spothop.checkpoint.errors import CheckpointConfigError

DEFAULT_INTERVAL_S = 20 * 60.0  # common practice on spot: every ~20 minutes
DEFAULT_MIN_INTERVAL_S = 60.0  # never checkpoint more often than this, however cheap saves look
DEFAULT_MAX_INTERVAL_S = 6 * 3600.0  # an hour-scale cap: M estimates from sparse history are noisy
COST_SMOOTHING = 0.3  # weight of the newest save in the running cost estimate


class IntervalPolicy(Protocol):
    """Decides the seconds between checkpoints given the current save cost estimate."""

    def interval_s(self, save_cost_s: float | None) -> float: ...


@dataclass(frozen=True)
class FixedInterval:
    """Checkpoint every ``seconds`` of wall time, whatever a save costs."""

    seconds: float = DEFAULT_INTERVAL_S

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise CheckpointConfigError(f"checkpoint interval must be positive seconds; got {self.seconds}")

    def interval_s(self, save_cost_s: float | None) -> float:
        return self.seconds


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum √(2CM)."""
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum; M itself when a save costs more than 2M."""
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost_s


@dataclass(frozen=True)
class YoungDalyInterval:
    """The optimal interval from measured save cost and the market's mean time between preemptions.

    ``mtbf_s`` is seconds or a callable returning seconds (asked each time).
    Until a save has been measured, ``initial_save_cost_s`` stands in for C.
    """

    mtbf_s: float | Callable[[], float]
    higher_order: bool = True
    initial_save_cost_s: float = 30.0
    min_interval_s: float = DEFAULT_MIN_INTERVAL_S
    max_interval_s: float = DEFAULT_MAX_INTERVAL_S

    def interval_s(self, save_cost_s: float | None) -> float:
        mtbf = float(self.mtbf_s()) if callable(self.mtbf_s) else float(self.mtbf_s)
        if not mtbf > 0:
            raise CheckpointConfigError(f"mean time between preemptions must be positive seconds; got {mtbf}")
        cost = self.initial_save_cost_s if save_cost_s is None else save_cost_s
        best = daly_interval_s(cost, mtbf) if self.higher_order else young_interval_s(cost, mtbf)
        return min(max(best, self.min_interval_s), self.max_interval_s)


class SaveCostMeter:
    """A smoothed estimate of what one save costs, from the saves measured so far."""

    def __init__(self, smoothing: float = COST_SMOOTHING) -> None:
        self.smoothing = smoothing
        self.estimate_s: float | None = None

    def record(self, seconds: float) -> None:
        previous = self.estimate_s
        self.estimate_s = seconds if previous is None else previous + self.smoothing * (seconds - previous)
