"""Goodput: the fraction of paid instance time that produces work which is kept.

With λ preemptions per second of the market, a checkpoint every τ seconds of
work that costs C seconds to save, R seconds to restart the worker (restore
the newest checkpoint, warm up) and B seconds to boot a replacement::

    goodput = τ / (τ + C)  ·  1 / (1 + λ · (B + R + (τ + C) / 2))

The first factor is the share of running time not spent saving. The second
is the renewal argument: each preemption throws away, on average, half a
segment of work and save since the last checkpoint, ``(τ + C)/2``, and pays
for a replacement to boot and restart, ``B + R``; over a stretch of running
time ``t`` there are ``λ·t`` of them, so paid time is ``t·(1 + λ·W)`` for
``t`` of running.

``τ`` ``None`` means *auto*: Daly's optimum for ``C`` and ``M = 1/λ``
(:func:`spothop.checkpoint.interval.daly_interval_s`), kept within the
checkpoint library's own bounds (:data:`MIN_INTERVAL_S`, :data:`MAX_INTERVAL_S`);
with λ = 0 a job still checkpoints, every :data:`MAX_INTERVAL_S`.

Properties the tests check: goodput is in (0, 1]; it falls as λ, C, R or B
rise; with the auto interval it is within 0.02 of the goodput of any fixed
interval. Both hold where a save costs at most a tenth of the mean time
between preemptions; beyond that Daly's formula (which jumps to τ = M where a
save costs 2M) is outside its own assumptions, and goodput there is tiny.

:func:`goodput_array` is the same formula over numpy arrays (the ranking
scores 100,000 markets at once); a test holds it equal to :func:`goodput`.
"""

from __future__ import annotations

import math

import numpy as np

from spothop.checkpoint.interval import (
    DEFAULT_MAX_INTERVAL_S,
    DEFAULT_MIN_INTERVAL_S,
    daly_interval_s,
)

SECONDS_PER_HOUR = 3600.0
MIN_INTERVAL_S = DEFAULT_MIN_INTERVAL_S
MAX_INTERVAL_S = DEFAULT_MAX_INTERVAL_S


def auto_interval_s(preemption_rate_per_h: float, save_s: float) -> float:
    """Daly's interval for save cost ``save_s`` and MTBP ``1/λ``, within the library's bounds."""
    if preemption_rate_per_h <= 0:
        return MAX_INTERVAL_S
    mtbf_s = SECONDS_PER_HOUR / preemption_rate_per_h
    if not math.isfinite(mtbf_s):
        return MAX_INTERVAL_S
    return min(max(daly_interval_s(save_s, mtbf_s), MIN_INTERVAL_S), MAX_INTERVAL_S)


def goodput(
    preemption_rate_per_h: float,
    interval_s: float | None,
    save_s: float,
    restart_s: float,
    boot_s: float,
) -> float:
    """The share of paid time that yields kept work (formula in the module docstring)."""
    tau = auto_interval_s(preemption_rate_per_h, save_s) if interval_s is None else interval_s
    rate_per_s = preemption_rate_per_h / SECONDS_PER_HOUR
    segment = tau + save_s
    if segment <= 0:
        return 1.0 / (1.0 + rate_per_s * (boot_s + restart_s))
    waste = boot_s + restart_s + segment / 2.0
    return (tau / segment) / (1.0 + rate_per_s * waste)


def _daly_array(cost_s: float, mtbf_s: np.ndarray) -> np.ndarray:
    """:func:`daly_interval_s` over an array of MTBFs (one save cost), the same expression."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = cost_s / (2.0 * mtbf_s)
        best = np.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + np.sqrt(ratio) / 3.0 + ratio / 9.0) - cost_s
    return np.where(cost_s >= 2.0 * mtbf_s, mtbf_s, best)


def auto_interval_array(preemption_rate_per_h: np.ndarray, save_s: float) -> np.ndarray:
    """:func:`auto_interval_s` over an array of rates."""
    rate = np.asarray(preemption_rate_per_h, dtype=float)
    positive = rate > 0
    with np.errstate(divide="ignore", over="ignore"):
        mtbf = np.where(positive, SECONDS_PER_HOUR / np.where(positive, rate, 1.0), math.inf)
    finite = positive & np.isfinite(mtbf)
    tau = np.clip(_daly_array(save_s, np.where(finite, mtbf, 1.0)), MIN_INTERVAL_S, MAX_INTERVAL_S)
    return np.where(finite, tau, MAX_INTERVAL_S)


def goodput_array(
    preemption_rate_per_h: np.ndarray,
    interval_s: float | None,
    save_s: float,
    restart_s: float,
    boot_s: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray]:
    """(goodput, the interval used) per market, for arrays of rates and boot times."""
    rate = np.asarray(preemption_rate_per_h, dtype=float)
    tau = (
        auto_interval_array(rate, save_s)
        if interval_s is None
        else np.full(rate.shape, float(interval_s))
    )
    segment = tau + save_s
    rate_per_s = rate / SECONDS_PER_HOUR
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(segment > 0, tau / np.where(segment > 0, segment, 1.0), 1.0)
    waste = np.asarray(boot_s, dtype=float) + restart_s + segment / 2.0
    return share / (1.0 + rate_per_s * waste), tau
