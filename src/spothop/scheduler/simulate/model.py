"""The tick model of ``shared/SIMULATION.md`` (Can't Be Late, NSDI'24), extended to zones and prices.

One run, tick by tick (tick ``t`` covers ``[t·gap, (t+1)·gap)``):

1. The policy sees a :class:`~spothop.scheduler.policies.base.DeadlineState`
   (work left, time, what ran last, each zone's spot availability *in this
   tick*, its price now and online estimates) and answers SPOT in a zone,
   ON_DEMAND or NONE; online policies pass through the safety rule.
2. SPOT where spot is unavailable becomes NONE.
3. A choice different from what ran last (another kind, or spot in another
   zone) **sets** the pending restart overhead to ``d``; the same choice keeps
   what was pending. A running tick credits ``max(gap − overhead, 0)`` s of
   work (capped at the work left) and bills the whole tick at its market's
   price (the spot price of that zone and tick, or the on-demand price); the
   overhead left over spills into the next tick. NONE credits and bills nothing.
4. Spot that ran in tick t−1 and is unavailable at t was preempted at the
   boundary: t−1 counted in full, the instance is gone at t.
5. The run ends in the tick the work completes (billed in full); it met its
   deadline if ``t·gap + overhead + the work it needed ≤ D``.

With one zone, constant prices and no estimates this is exactly SIMULATION.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from spothop.bounds import HOURS, PRICE_USD_PER_HOUR
from spothop.errors import ConfigError
from spothop.scheduler.policies.base import (
    EPS_S,
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    Policy,
    ZoneView,
    apply_safety_rule,
)
from spothop.scheduler.simulate.estimates import ZoneHistory

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
S_PER_H = 3600.0


@dataclass(frozen=True)
class JobSetting:
    """The job and market constants of a run (SIMULATION.md's published setting by default).

    ``spot_price_usd_per_hour`` applies to zones whose trace carries no prices.
    Construct through :meth:`checked` from user input: errors name the flag.
    """

    task_s: float = 48 * S_PER_H
    deadline_s: float = 52 * S_PER_H
    restart_overhead_s: float = 0.02 * S_PER_H
    spot_price_usd_per_hour: float = 0.9731
    on_demand_price_usd_per_hour: float = 3.06

    @classmethod
    def checked(
        cls,
        task_hours: float,
        deadline_hours: float,
        restart_overhead_hours: float,
        spot_price: float,
        on_demand_price: float,
    ) -> JobSetting:
        """A setting from the CLI's hour/dollar flags, refusing what has no meaning."""
        values = {
            "--task-hours": task_hours,
            "--deadline-hours": deadline_hours,
            "--restart-overhead-hours": restart_overhead_hours,
            "--spot-price": spot_price,
            "--on-demand-price": on_demand_price,
        }
        for flag, value in values.items():
            if not math.isfinite(value):
                raise ConfigError(f"{flag} {value!r}: expected a finite number")
            # Bounded, so the tick grid stays in memory and a cost stays finite (spothop.bounds).
            (PRICE_USD_PER_HOUR if flag.endswith("price") else HOURS).check(value, flag)
        if task_hours <= 0:
            raise ConfigError(f"--task-hours {task_hours:g}: expected a positive number of hours")
        if restart_overhead_hours < 0:
            raise ConfigError(
                f"--restart-overhead-hours {restart_overhead_hours:g}: expected 0 or more hours"
            )
        for flag in ("--spot-price", "--on-demand-price"):
            if values[flag] <= 0:
                raise ConfigError(f"{flag} {values[flag]:g}: expected a positive price in USD/h")
        if deadline_hours < task_hours:
            raise ConfigError(
                f"--deadline-hours {deadline_hours:g} is shorter than --task-hours "
                f"{task_hours:g}: no policy can finish in time; give a deadline ≥ the task"
            )
        return cls(
            task_s=task_hours * S_PER_H,
            deadline_s=deadline_hours * S_PER_H,
            restart_overhead_s=restart_overhead_hours * S_PER_H,
            spot_price_usd_per_hour=spot_price,
            on_demand_price_usd_per_hour=on_demand_price,
        )

    def horizon_ticks(self, tick_s: float) -> int:
        """Ticks a run may take at most: the deadline, then on-demand from scratch (a late run)."""
        return (
            math.ceil(self.deadline_s / tick_s)
            + math.ceil(self.task_s / tick_s)
            + 2
            + math.ceil(self.restart_overhead_s / tick_s)
        )


@dataclass(frozen=True, eq=False)
class Zone:
    """One zone's spot market over a whole trace: availability per tick, prices per tick or None."""

    name: str
    tick_s: float
    available: BoolArray
    prices_usd_per_hour: FloatArray | None = None
    source: str = ""
    history: ZoneHistory = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", ZoneHistory(self.available, self.tick_s))

    def __len__(self) -> int:
        return len(self.available)


@dataclass(frozen=True)
class Window:
    """Zones (same tick length) the job may use, and the trace tick the job starts at."""

    zones: tuple[Zone, ...]
    start_tick: int = 0

    @property
    def tick_s(self) -> float:
        return self.zones[0].tick_s

    @property
    def label(self) -> str:
        names = "+".join(z.name for z in self.zones)
        return f"{names}@{self.start_tick}"

    @property
    def any_zone(self) -> Zone | None:
        """With several zones, one whose spot is available when any of them is (else None)."""
        if len(self.zones) < 2:
            return None
        key = tuple(id(z) for z in self.zones)
        union = _UNIONS.get(key)
        if union is None or any(a is not b for a, b in zip(union[0], self.zones, strict=True)):
            length = min(len(z) for z in self.zones)
            either = np.logical_or.reduce([z.available[:length] for z in self.zones])
            union = (self.zones, Zone("+".join(z.name for z in self.zones), self.tick_s, either))
            _UNIONS[key] = union
        return union[1]


_UNIONS: dict[tuple[int, ...], tuple[tuple[Zone, ...], Zone]] = {}


@dataclass(frozen=True)
class TickRecord:
    """One tick of a recorded run (tests replay these against hand-computed sequences)."""

    tick: int
    decision: Decision
    credit_s: float
    cost_usd: float
    work_left_s: float


@dataclass(frozen=True)
class RunResult:
    """What one run cost and how it went. ``cost_microusd`` is the ledger's unit."""

    label: str
    policy: str
    start_tick: int
    cost_usd: float
    finish_h: float
    deadline_met: bool
    preemptions: int
    restarts: int
    spot_hours: float
    on_demand_hours: float
    ticks: tuple[TickRecord, ...] = ()
    migrations: int = 0  # make-before-break moves (a plain move is a restart)

    @property
    def cost_microusd(self) -> int:
        return round(self.cost_usd * 1_000_000)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "policy": self.policy,
            "start_tick": self.start_tick,
            "cost": round(self.cost_usd, 6),
            "cost_microusd": self.cost_microusd,
            "finish_hours": round(self.finish_h, 6),
            "deadline_met": self.deadline_met,
            "preemptions": self.preemptions,
            "restarts": self.restarts,
            "spot_hours": round(self.spot_hours, 6),
            "on_demand_hours": round(self.on_demand_hours, 6),
            "migrations": self.migrations,
        }


class SimulationError(ConfigError):
    """A run cannot go on (a policy that never finishes, a window past its traces)."""


def _window_lists(
    zone: Zone, start: int, ticks: int, default_price: float
) -> tuple[list[bool], list[float]]:
    index = np.arange(start, start + ticks) % len(zone)
    available = zone.available[index].tolist()
    if zone.prices_usd_per_hour is None:
        return available, [default_price] * ticks
    return available, zone.prices_usd_per_hour[index].tolist()


@dataclass
class _Tally:
    """What a run has done so far (the hot loop's mutable state)."""

    work_left: float
    last: Decision = IDLE
    pending: float = 0.0
    cost: float = 0.0
    preemptions: int = 0
    restarts: int = 0
    spot_ticks: int = 0
    od_ticks: int = 0
    migrations: int = 0
    finish: float = math.inf

    def work(self, credit_s: float, work_starts_s: float) -> float:
        """Credit a running tick whose work starts at ``work_starts_s``; the credit actually used."""
        if credit_s >= self.work_left - EPS_S:
            used, self.work_left = self.work_left, 0.0
            self.finish = work_starts_s + used
            return used
        self.work_left -= credit_s
        return credit_s


def _choose(policy: Policy, state: DeadlineState, available: list[list[bool]], t: int) -> Decision:
    """The policy's decision after the safety rule, SPOT where spot is gone made NONE."""
    decision = policy.decide(state)
    if policy.online:
        decision = apply_safety_rule(state, decision)
    if decision.kind is Kind.SPOT:
        if not 0 <= decision.zone < len(available):
            raise SimulationError(
                f"policy {policy.name!r} chose zone {decision.zone}, which does not exist"
            )
        if decision.make_before_break:
            return _make_before_break(state, decision, available, t)
        if not available[decision.zone][t]:
            return IDLE
    elif decision.kind is Kind.ON_DEMAND and decision.zone:
        return ON_DEMAND
    return decision


def _make_before_break(
    state: DeadlineState, decision: Decision, available: list[list[bool]], t: int
) -> Decision:
    """A make-before-break move as it can happen: from spot running in another zone, with a
    restart that fits in a tick, to a zone that is up; the old instance stays if the new zone
    is down; anything else is a plain decision."""
    last = state.last
    moving = (
        last.kind is Kind.SPOT
        and available[last.zone][t]
        and last.zone != decision.zone
        and state.restart_overhead_s <= state.tick_s
    )
    if not moving:
        plain = Decision(Kind.SPOT, decision.zone)
        return plain if available[decision.zone][t] else IDLE
    return decision if available[decision.zone][t] else Decision(Kind.SPOT, last.zone)


def _views(
    window: Window,
    t: int,
    avail: list[list[bool]],
    prices: list[list[float]],
    union: Zone | None,
    union_avail: list[bool] | None,
    estimates: bool,
) -> tuple[tuple[ZoneView, ...], ZoneView | None]:
    """Each zone as known at tick t (with estimates from the trace so far if asked), and the union."""
    zones = window.zones
    if not estimates:
        return tuple(ZoneView(avail[i][t], prices[i][t]) for i in range(len(zones))), None
    at = window.start_tick + t
    views = tuple(z.history.view(at, avail[i][t], prices[i][t]) for i, z in enumerate(zones))
    if union is None or union_avail is None:
        return views, None
    return views, union.history.view(at, union_avail[t], 0.0)


@dataclass(frozen=True)
class _Tape:
    """A run's window as plain lists for the hot loop, and what one tick bills."""

    avail: list[list[bool]]  # [zone][tick]
    prices: list[list[float]]  # [zone][tick], USD per hour
    estimates: bool  # whether the policy sees online estimates (``uses_estimates``)
    union: Zone | None  # the any-zone union, when it does
    union_avail: list[bool] | None
    bill: float  # hours billed per tick
    od_tick_cost: float  # USD for one tick on demand


def _tape(policy: Policy, window: Window, setting: JobSetting, horizon: int) -> _Tape:
    """Read the window's traces for ``horizon`` ticks; the policy prepares (an oracle sees all)."""
    lists = [
        _window_lists(z, window.start_tick, horizon, setting.spot_price_usd_per_hour)
        for z in window.zones
    ]
    wants_estimates = getattr(policy, "uses_estimates", False)
    prepare = getattr(policy, "prepare", None)
    if prepare is not None:
        prepare(window, setting)
    bill = window.tick_s / S_PER_H
    union = window.any_zone if wants_estimates else None
    union_avail = None
    if union is not None:
        union_avail = _window_lists(union, window.start_tick, horizon, 0.0)[0]
    return _Tape(
        avail=[a for a, _ in lists],
        prices=[p for _, p in lists],
        estimates=wants_estimates,
        union=union,
        union_avail=union_avail,
        bill=bill,
        od_tick_cost=setting.on_demand_price_usd_per_hour * bill,
    )


def run(
    policy: Policy,
    window: Window,
    setting: JobSetting,
    *,
    name: str | None = None,
    record: bool = False,
) -> RunResult:
    """One job from ``window.start_tick`` under ``policy``, tick by tick (module docstring)."""
    gap, task = window.tick_s, setting.task_s
    horizon = setting.horizon_ticks(gap)
    tape = _tape(policy, window, setting, horizon)
    run_ = _Tally(task)
    records: list[TickRecord] = []
    t = 0
    while run_.work_left > EPS_S:
        if t >= horizon:
            raise SimulationError(
                f"policy {policy.name!r} had not finished {task / S_PER_H:g} h of work after "
                f"{horizon} ticks on {window.label}"
            )
        last = run_.last
        if last.kind is Kind.SPOT and not tape.avail[last.zone][t]:
            run_.preemptions += 1
        views, any_zone = _views(
            window, t, tape.avail, tape.prices, tape.union, tape.union_avail, tape.estimates
        )
        state = DeadlineState(
            t * gap,
            run_.work_left,
            task,
            setting.deadline_s,
            setting.restart_overhead_s,
            gap,
            last,
            run_.pending,
            views,
            setting.on_demand_price_usd_per_hour,
            any_zone,
        )
        decision = _choose(policy, state, tape.avail, t)
        credit, tick_cost = _play(run_, decision, last, t, gap, setting.restart_overhead_s, tape)
        if record:
            records.append(TickRecord(t, decision, credit, tick_cost, run_.work_left))
        t += 1
    return RunResult(
        label=window.label,
        policy=name or policy.name,
        start_tick=window.start_tick,
        cost_usd=run_.cost,
        finish_h=run_.finish / S_PER_H,
        deadline_met=run_.finish <= setting.deadline_s + EPS_S,
        preemptions=run_.preemptions,
        restarts=run_.restarts,
        spot_hours=run_.spot_ticks * tape.bill,
        on_demand_hours=run_.od_ticks * tape.bill,
        ticks=tuple(records),
        migrations=run_.migrations,
    )


def _play(
    run_: _Tally, decision: Decision, last: Decision, t: int, gap: float, d: float, tape: _Tape
) -> tuple[float, float]:
    """Steps 3 and 5 for tick ``t``: pay the overhead, credit the work, bill the tick; returns
    (seconds of work credited, USD billed)."""
    credit = tick_cost = 0.0
    if decision.kind is Kind.NONE:
        run_.last, run_.pending = IDLE, 0.0
    elif decision.make_before_break:  # the old zone works the tick while the new one boots
        overhead = run_.pending
        credit = gap - overhead
        tick_cost = (tape.prices[last.zone][t] + tape.prices[decision.zone][t]) * tape.bill
        run_.cost += tick_cost
        run_.spot_ticks += 1
        run_.migrations += 1
        credit = run_.work(credit, t * gap + overhead)
        run_.last, run_.pending = Decision(Kind.SPOT, decision.zone), 0.0
    else:
        if decision != last:
            overhead = d
            run_.restarts += 1
        else:
            overhead = run_.pending
        credit = gap - overhead if overhead < gap else 0.0
        run_.pending = overhead - gap if overhead > gap else 0.0
        if decision.kind is Kind.SPOT:
            tick_cost = tape.prices[decision.zone][t] * tape.bill
            run_.spot_ticks += 1
        else:
            tick_cost = tape.od_tick_cost
            run_.od_ticks += 1
        run_.cost += tick_cost
        credit = run_.work(credit, t * gap + overhead)
        run_.last = decision
    return credit, tick_cost


def zone_from_flags(
    name: str, available: Sequence[bool], tick_s: float, prices: Sequence[float] | None = None
) -> Zone:
    """A zone from plain lists (tests and hand-built traces)."""
    return Zone(
        name,
        float(tick_s),
        np.asarray(available, dtype=bool),
        None if prices is None else np.asarray(prices, dtype=np.float64),
    )
