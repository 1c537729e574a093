"""An availability trace: how many spot instances could be had, tick by tick.

Time inside a trace is an *offset* in seconds from the trace's first tick. Tick
``i`` covers ``[i·tick_s, (i+1)·tick_s)``, so a change happens exactly at a tick
boundary and the value *at* a boundary is the new tick's.

Offsets past the end **wrap around**: the trace repeats forever with period
``duration_s``, so a simulation may run longer than the recording. Negative
offsets are a caller's bug and raise ``ValueError``. Every query is O(1) or
O(log n): the transitions are computed once per ``need`` and searched with bisect.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class TraceKind(StrEnum):
    """How a trace file's integers are to be read."""

    UNAVAILABLE_FLAG = "unavailable_flag"  # 1 = unavailable/preempted, 0 = available
    AVAILABLE_COUNT = "available_count"  # n = instances obtainable in that tick


@dataclass(frozen=True)
class _Edges:
    """Tick positions ``p`` in ``1..n`` where a series changes (``p = n``: the wrap back to 0)."""

    any_change: tuple[int, ...]
    drops: tuple[int, ...]  # ok at p-1, not ok at p
    rises: tuple[int, ...]  # not ok at p-1, ok at p


def _edges(counts: IntArray, need: int | None) -> _Edges:
    wrapped = np.append(counts, counts[:1])
    if need is None:
        changed = np.flatnonzero(wrapped[1:] != wrapped[:-1]) + 1
        return _Edges(tuple(int(p) for p in changed), (), ())
    ok = wrapped >= need
    drops = np.flatnonzero(ok[:-1] & ~ok[1:]) + 1
    rises = np.flatnonzero(~ok[:-1] & ok[1:]) + 1
    changed = np.sort(np.concatenate([drops, rises]))
    return _Edges(
        tuple(int(p) for p in changed),
        tuple(int(p) for p in drops),
        tuple(int(p) for p in rises),
    )


@dataclass(frozen=True, eq=False)
class AvailabilityTrace:
    """Instances obtainable per tick in one market, read from a file or generated.

    ``counts`` is a read-only int64 array, ``0 <= counts[i] <= capacity``.
    ``prices_usd_per_hour``, when the source carries one, is aligned with ``counts``.
    """

    name: str
    tick_s: float
    counts: IntArray
    capacity: int
    source: str = ""
    kind: TraceKind = TraceKind.AVAILABLE_COUNT
    start_time: datetime | None = None
    prices_usd_per_hour: FloatArray | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    _cache: dict[int | None, _Edges] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts, dtype=np.int64).copy()
        if counts.ndim != 1 or counts.size == 0:
            raise ValueError(f"trace {self.name!r}: counts must be a non-empty 1-D array")
        if not (self.tick_s > 0 and math.isfinite(self.tick_s)):
            raise ValueError(f"trace {self.name!r}: tick_s must be > 0, got {self.tick_s}")
        if counts.min() < 0 or counts.max() > self.capacity:
            raise ValueError(
                f"trace {self.name!r}: counts must lie in 0..{self.capacity}, "
                f"got {counts.min()}..{counts.max()}"
            )
        counts.setflags(write=False)
        object.__setattr__(self, "counts", counts)
        if self.prices_usd_per_hour is not None:
            prices = np.asarray(self.prices_usd_per_hour, dtype=np.float64).copy()
            if prices.shape != counts.shape:
                raise ValueError(f"trace {self.name!r}: prices must have one value per tick")
            prices.setflags(write=False)
            object.__setattr__(self, "prices_usd_per_hour", prices)

    def __repr__(self) -> str:
        return (
            f"AvailabilityTrace(name={self.name!r}, tick_s={self.tick_s}, "
            f"ticks={len(self)}, capacity={self.capacity}, source={self.source!r})"
        )

    def __len__(self) -> int:
        return int(self.counts.size)

    @property
    def duration_s(self) -> float:
        """Length of one pass through the trace; offsets wrap with this period."""
        return len(self) * self.tick_s

    def tick_index(self, offset_s: float) -> int:
        """The tick (0..n-1) that ``offset_s`` falls in, after wrapping."""
        if offset_s < 0 or not math.isfinite(offset_s):
            raise ValueError(f"trace {self.name!r}: offset must be finite and >= 0, got {offset_s}")
        return int(offset_s // self.tick_s) % len(self)

    def available_at(self, offset_s: float) -> int:
        """Instances obtainable at ``offset_s`` (wrapping past the end)."""
        return int(self.counts[self.tick_index(offset_s)])

    def is_available(self, offset_s: float, need: int = 1) -> bool:
        """True when at least ``need`` instances are obtainable at ``offset_s``."""
        return self.available_at(offset_s) >= need

    def price_at(self, offset_s: float) -> float | None:
        """The trace's own price at ``offset_s``, or None when the source had none."""
        if self.prices_usd_per_hour is None:
            return None
        return float(self.prices_usd_per_hour[self.tick_index(offset_s)])

    def availability_fraction(self, need: int = 1) -> float:
        """Fraction of ticks with at least ``need`` instances obtainable."""
        return float(np.mean(self.counts >= need))

    def preemption_count(self, need: int = 1) -> int:
        """Transitions from available (≥ need) to unavailable within one pass (no wrap)."""
        ok = self.counts >= need
        return int(np.count_nonzero(ok[:-1] & ~ok[1:]))

    def outages(self, need: int = 1) -> list[tuple[float, float]]:
        """Maximal runs with fewer than ``need`` instances, as ``(start_s, duration_s)``.

        One pass, no wrap: an outage running into the end stops at ``duration_s``.
        """
        bad = np.concatenate([[False], self.counts < need, [False]]).astype(np.int8)
        step = np.diff(bad)
        starts = np.flatnonzero(step == 1)
        ends = np.flatnonzero(step == -1)
        return [
            (float(s * self.tick_s), float((e - s) * self.tick_s))
            for s, e in zip(starts, ends, strict=True)
        ]

    def next_change_after(self, offset_s: float) -> float | None:
        """The first offset > ``offset_s`` where the count changes; None if it never does.

        The answer is in the same unwrapped offset space as the argument.
        """
        return self._next_edge(self._edges(None).any_change, offset_s)

    def next_drop_after(self, offset_s: float, need: int = 1) -> float | None:
        """The first offset > ``offset_s`` where availability falls below ``need``.

        If the market is unavailable at ``offset_s`` this is the drop after the
        next recovery. None when availability never falls below ``need``.
        """
        return self._next_edge(self._edges(need).drops, offset_s)

    def next_available_after(self, offset_s: float, need: int = 1) -> float | None:
        """``offset_s`` itself if available then, else the next recovery; None if never."""
        if self.is_available(offset_s, need):
            return offset_s
        return self._next_edge(self._edges(need).rises, offset_s)

    def _edges(self, need: int | None) -> _Edges:
        edges = self._cache.get(need)
        if edges is None:
            edges = _edges(self.counts, need)
            self._cache[need] = edges
        return edges

    def _next_edge(self, positions: tuple[int, ...], offset_s: float) -> float | None:
        self.tick_index(offset_s)  # validates offset_s
        if not positions:
            return None
        n = len(self)
        absolute_tick = int(offset_s // self.tick_s)
        cycle, tick = divmod(absolute_tick, n)
        k = bisect_right(positions, tick)
        if k < len(positions):
            return (cycle * n + positions[k]) * self.tick_s
        return ((cycle + 1) * n + positions[0]) * self.tick_s
