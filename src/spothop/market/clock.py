"""Clocks: where "now" comes from, so the market can run on real, manual or fast time.

Every time is unix seconds (float). Code that needs the time takes a :class:`Clock`
instead of calling :func:`time.time`, so tests use a :class:`ManualClock` and never
sleep, and the local cloud runs a :class:`SimClock` many times faster than real time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


@runtime_checkable
class Clock(Protocol):
    """A source of (possibly simulated) time.

    ``now()`` returns unix seconds and never goes backwards; ``sleep(seconds)``
    returns once ``now()`` has advanced by at least ``seconds`` of this clock's time.
    """

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class WallClock:
    """Real time: ``time.time()`` and ``time.sleep()``."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class ManualClock:
    """Time that moves only when told to; ``sleep`` advances it instantly (for tests)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (must be ≥ 0: time never goes backwards)."""
        if seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"ManualClock.advance needs a finite seconds >= 0, got {seconds}")
        self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


class SimClockSpec(BaseModel):
    """Everything needed to rebuild the same :class:`SimClock` in another process."""

    model_config = ConfigDict(frozen=True)

    speed: float = Field(gt=0, allow_inf_nan=False)
    sim_start: float = Field(allow_inf_nan=False)
    wall_start: float = Field(allow_inf_nan=False)


class SimClock:
    """Simulated time running ``speed`` times faster than the wall clock.

    ``now() = sim_start + (wall_now - wall_start) * speed``. The clock is a pure
    function of ``(speed, sim_start, wall_start)`` and the wall time, so every
    process that builds ``SimClock(speed, sim_start, wall_start)`` with the same
    three numbers agrees on the simulated time (to the precision of their wall
    clocks). ``wall_start`` defaults to the wall time at construction: pass
    :attr:`spec` to the other processes. ``sleep(s)`` sleeps ``s / speed`` real seconds.
    """

    def __init__(
        self,
        speed: float,
        sim_start: float,
        wall_start: float | None = None,
        *,
        wall: Callable[[], float] = time.time,
        wall_sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._wall = wall
        self._wall_sleep = wall_sleep
        start = wall() if wall_start is None else wall_start
        self._spec = SimClockSpec(speed=speed, sim_start=sim_start, wall_start=start)

    @classmethod
    def from_spec(cls, spec: SimClockSpec) -> SimClock:
        """The same clock as the one ``spec`` was taken from (e.g. in a child process)."""
        return cls(spec.speed, spec.sim_start, spec.wall_start)

    @property
    def spec(self) -> SimClockSpec:
        return self._spec

    @property
    def speed(self) -> float:
        return self._spec.speed

    @property
    def sim_start(self) -> float:
        return self._spec.sim_start

    @property
    def wall_start(self) -> float:
        return self._spec.wall_start

    def now(self) -> float:
        return self.sim_start + (self._wall() - self.wall_start) * self.speed

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._wall_sleep(seconds / self.speed)
