"""When to checkpoint: a fixed period, or Young/Daly from save cost and preemption rate.

With checkpoint cost C and mean time between failures (here: preemptions) M,
Young (1974) showed the interval that minimises expected lost work is about
√(2CM); Daly (2006) refined it to
``√(2CM)·(1 + ⅓·√(C/2M) + ⅑·(C/2M)) − C`` for C < 2M, and M otherwise.
Both are re-evaluated on every call, so the interval follows C as saves are
measured and M as the market changes (M may be a callable that asks the
market layer). The default is time-based, every 20 minutes, which is what
practitioners on spot capacity use when they know nothing better.

Under the job controller, :func:`interval_from_env` is what a
:class:`~spothop.checkpoint.Checkpointer` uses when given no policy: a fixed
``SPOTHOP_CHECKPOINT_INTERVAL_S`` (the job spec's ``checkpoint.interval``) wins;
otherwise ``SPOTHOP_PREEMPTION_RATE_PER_H`` (λ of the market the attempt was
placed in) gives Young/Daly with M = 1/λ, starting from
``SPOTHOP_CHECKPOINT_SAVE_COST_S`` (the spec's ``save_cost_s``) until a save is
measured; with neither, the 20-minute default.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from spothop.checkpoint.errors import CheckpointConfigError

DEFAULT_INTERVAL_S = 20 * 60.0  # common practice on spot: every ~20 minutes
DEFAULT_MIN_INTERVAL_S = 60.0  # never checkpoint more often than this, however cheap saves look
DEFAULT_MAX_INTERVAL_S = 6 * 3600.0  # an hour-scale cap: M estimates from sparse history are noisy
COST_SMOOTHING = 0.3  # weight of the newest save in the running cost estimate


INTERVAL_ENV = "SPOTHOP_CHECKPOINT_INTERVAL_S"  # a fixed interval from the job spec: wins
RATE_ENV = "SPOTHOP_PREEMPTION_RATE_PER_H"  # λ of the market the attempt runs in
SAVE_COST_ENV = "SPOTHOP_CHECKPOINT_SAVE_COST_S"  # a first guess at C until a save is measured


class IntervalPolicy(Protocol):
    """Decides the seconds between checkpoints given the current save cost estimates: the whole
    save (copy, encode, write, commit) and the stall it caused the training loop."""

    def interval_s(self, save_cost_s: float | None, stall_s: float | None = None) -> float: ...


@dataclass(frozen=True)
class FixedInterval:
    """Checkpoint every ``seconds`` of wall time, whatever a save costs."""

    seconds: float = DEFAULT_INTERVAL_S

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise CheckpointConfigError(
                f"checkpoint interval must be positive seconds; got {self.seconds}"
            )

    def interval_s(self, save_cost_s: float | None, stall_s: float | None = None) -> float:
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

    ``cost_basis`` says what C is. ``"total"`` (the default) is the whole save,
    copy to commit: conservative for asynchronous saves, whose encoding and
    upload run beside training but still take CPU, disk and network from it.
    ``"stall"`` is only the time the training loop waited (the copy, or with
    ``overlap`` whatever of it the next step did not hide), which is the
    overhead Young and Daly meant when the background work does not slow
    training (a GPU job whose host has cores and bandwidth to spare). Saves are
    then never planned closer together than one whole save takes, since one
    save is in flight at most.
    """

    mtbf_s: float | Callable[[], float]
    higher_order: bool = True
    initial_save_cost_s: float = 30.0
    min_interval_s: float = DEFAULT_MIN_INTERVAL_S
    max_interval_s: float = DEFAULT_MAX_INTERVAL_S
    cost_basis: str = "total"

    def __post_init__(self) -> None:
        if self.cost_basis not in ("total", "stall"):
            raise CheckpointConfigError(
                f"cost_basis must be 'total' or 'stall'; got {self.cost_basis!r}"
            )

    def interval_s(self, save_cost_s: float | None, stall_s: float | None = None) -> float:
        mtbf = float(self.mtbf_s()) if callable(self.mtbf_s) else float(self.mtbf_s)
        if not mtbf > 0:
            raise CheckpointConfigError(
                f"mean time between preemptions must be positive seconds; got {mtbf}"
            )
        total = self.initial_save_cost_s if save_cost_s is None else save_cost_s
        cost, floor = (
            (stall_s, total) if self.cost_basis == "stall" and stall_s is not None else (total, 0.0)
        )
        best = daly_interval_s(cost, mtbf) if self.higher_order else young_interval_s(cost, mtbf)
        return min(max(best, floor, self.min_interval_s), self.max_interval_s)


class SaveCostMeter:
    """Smoothed estimates of what one save costs (``estimate_s``, the whole save) and of the stall
    it causes the training loop (``stall_s``), from the saves measured so far."""

    def __init__(self, smoothing: float = COST_SMOOTHING) -> None:
        self.smoothing = smoothing
        self.estimate_s: float | None = None
        self.stall_s: float | None = None

    def record(self, seconds: float) -> None:
        self.estimate_s = self._smooth(self.estimate_s, seconds)

    def record_stall(self, seconds: float) -> None:
        self.stall_s = self._smooth(self.stall_s, seconds)

    def _smooth(self, previous: float | None, seconds: float) -> float:
        return seconds if previous is None else previous + self.smoothing * (seconds - previous)


def _env_float(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise CheckpointConfigError(
            f"{name} must be a number; got {raw!r} (unset it for the default)"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise CheckpointConfigError(f"{name} must be a finite number >= 0; got {raw!r}")
    return value


def interval_from_env(environ: Mapping[str, str] | None = None) -> IntervalPolicy:
    """The interval the job's environment asks for (see the module docstring).

    ``SPOTHOP_CHECKPOINT_INTERVAL_S`` > 0 → :class:`FixedInterval`; else
    ``SPOTHOP_PREEMPTION_RATE_PER_H`` > 0 → :class:`YoungDalyInterval` with
    ``mtbf_s = 3600 / λ`` (and ``SPOTHOP_CHECKPOINT_SAVE_COST_S`` as the first C);
    else :class:`FixedInterval` at the default. A value that is not a number
    raises :class:`CheckpointConfigError` naming the variable.
    """
    env = os.environ if environ is None else environ
    fixed = _env_float(env, INTERVAL_ENV)
    if fixed:
        return FixedInterval(fixed)
    rate_per_h = _env_float(env, RATE_ENV)
    if rate_per_h:
        cost = _env_float(env, SAVE_COST_ENV)
        if cost:
            return YoungDalyInterval(mtbf_s=3600.0 / rate_per_h, initial_save_cost_s=cost)
        return YoungDalyInterval(mtbf_s=3600.0 / rate_per_h)
    return FixedInterval()
