"""``optimal``: the offline oracle — a dynamic programme over the whole trace, the lower bound.

State at the start of tick t: the work left w (in quanta q = gcd of the tick,
the overhead, the task and the deadline's last partial tick, so every credit
is a whole number of quanta), what ran last (NONE, ON_DEMAND or SPOT in zone
z) and the restart overhead still pending on it (only when the overhead is
longer than a tick). V_t(last, pending, w) is the least money that still
finishes w by the deadline; V at the deadline is 0 for w = 0 and ∞ otherwise.
Each tick one of NONE (free, w kept), ON_DEMAND, or SPOT in an available zone
(billed the tick, credited gap − overhead, where the overhead is the pending
one when the choice is what ran last and d when it is not). Spot that is
unavailable at t leaves its last-type row equal to NONE's (the instance is
gone). The answer is V_0(NONE, 0, task); the policy replays the argmin.

Work is vectorised over w (numpy), so one 48 h run at 600 s ticks takes tens
of milliseconds. It never costs more than any online policy on the same run
(a test checks it): every online run is one of the paths the programme
minimises over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from spothop.errors import ConfigError
from spothop.scheduler.policies.base import (
    EPS_S,
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    Policy,
    register,
)

if TYPE_CHECKING:
    from spothop.scheduler.simulate.model import JobSetting, Window

MAX_QUANTA = 2_000_000  # work left in more quanta than this would take minutes per run
MS = 1000  # times are made whole milliseconds to find the quantum exactly


@dataclass
class Plan:
    """The programme's answer for one window: its cost and, if kept, the choice per state."""

    cost_usd: float
    quantum_s: float
    ticks: int  # ticks up to the deadline (the last may be partial)
    pending_levels: int
    choices: npt.NDArray[np.int8] | None  # [tick, last type, pending level, w] → choice code

    @property
    def feasible(self) -> bool:
        return math.isfinite(self.cost_usd)


def _quantum_ms(values_s: list[float]) -> int:
    ms = [round(v * MS) for v in values_s if v > EPS_S]
    q = 0
    for v in ms:
        q = math.gcd(q, v)
    return max(q, 1)


def _shift(
    values: npt.NDArray[np.float64], credit: int, lo: int, hi: int
) -> npt.NDArray[np.float64]:
    """out[w] = values[w − credit] for w in [lo, hi]; values[0] is 0, so a finishing credit reads 0."""
    a, b = lo - credit, hi - credit + 1
    if a >= 0:
        return values[a:b]
    head = np.zeros(min(-a, hi - lo + 1))
    return np.concatenate([head, values[: max(b, 0)]]) if b > 0 else head


def _widen(
    band: npt.NDArray[np.float64], lo: int, template: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """A full-length value row: ``band`` at [lo, lo+len), ∞ elsewhere (0 at w = 0)."""
    out = template.copy()
    out[lo : lo + len(band)] = band
    out[0] = 0.0
    return out


Values = list[list[npt.NDArray[np.float64]]]  # [last type][pending level] → V over w


@dataclass(frozen=True, eq=False)
class _Grid:
    """The programme's dimensions, in ticks and quanta of work, and the window's market per tick."""

    gap: float  # the tick, s
    d: float  # the restart overhead, s
    deadline_s: float
    full: int  # whole ticks before the deadline
    rem: float  # the deadline's last partial tick, s
    ticks: int  # ``full``, plus the partial one if any
    q: float  # the quantum of work, s
    units: int  # the task, in quanta
    nz: int  # zones
    ntypes: int  # 0 NONE, 1 ON_DEMAND, 2+z SPOT in zone z
    levels: int  # pending levels: 0 = none, k ≥ 1 = d − k·gap still to pay (only when d > gap)
    pending: list[float]  # the overhead still to pay at each level, s
    avail: npt.NDArray[np.bool_]  # [zone, tick]
    prices: npt.NDArray[np.float64]  # [zone, tick], USD per hour
    od_cost: float  # one tick on demand, USD

    @property
    def per_tick(self) -> int:
        return round(self.gap / self.q)

    def step(self, overhead: float, tick_len: float) -> tuple[int, int]:
        """A running tick paying ``overhead``: (quanta credited, pending level left for the next)."""
        credit = max(tick_len - overhead, 0.0)
        spill = overhead - tick_len
        level = 0 if spill <= EPS_S else round((self.d - spill) / self.gap)
        return round(credit / self.q), level


def _grid(window: Window, setting: JobSetting) -> _Grid:
    """The quantum, the ticks and the pending levels of ``setting`` on ``window``; ConfigError
    when the task is more quanta than :data:`MAX_QUANTA`."""
    gap, d = window.tick_s, setting.restart_overhead_s
    full = math.floor(setting.deadline_s / gap + EPS_S)
    rem = setting.deadline_s - full * gap
    ticks = full + (1 if rem > EPS_S else 0)
    q_ms = _quantum_ms([gap, d, setting.task_s, rem if rem > EPS_S else 0.0])
    q = q_ms / MS
    units = round(setting.task_s / q)
    if units > MAX_QUANTA:
        raise ConfigError(
            f"the optimal policy would track {units} quanta of {q:g} s of work; use whole-second "
            "overheads and task lengths that share a larger divisor with the tick"
        )
    nz = len(window.zones)
    levels = 1 + (math.ceil(d / gap - EPS_S) - 1 if d > gap + EPS_S else 0)
    idx = (window.start_tick + np.arange(ticks)) % len(window.zones[0])
    prices = np.stack(
        [
            z.prices_usd_per_hour[idx]
            if z.prices_usd_per_hour is not None
            else np.full(ticks, setting.spot_price_usd_per_hour)
            for z in window.zones
        ]
    )
    return _Grid(
        gap=gap,
        d=d,
        deadline_s=setting.deadline_s,
        full=full,
        rem=rem,
        ticks=ticks,
        q=q,
        units=units,
        nz=nz,
        ntypes=2 + nz,
        levels=levels,
        pending=[0.0] + [d - k * gap for k in range(1, levels)],
        avail=np.stack([z.available[idx] for z in window.zones]),
        prices=prices,
        od_cost=setting.on_demand_price_usd_per_hour * gap / 3600.0,
    )


def solve(window: Window, setting: JobSetting, keep_choices: bool = True) -> Plan:
    """The least cost of finishing ``setting.task_s`` by the deadline on ``window`` (module docstring)."""
    grid = _grid(window, setting)
    inf = np.full(grid.units + 1, np.inf)
    inf[0] = 0.0
    nxt: Values = [[inf] * grid.levels for _ in range(grid.ntypes)]
    choices = (
        np.zeros((grid.ticks, grid.ntypes, grid.levels, grid.units + 1), dtype=np.int8)
        if keep_choices
        else None
    )
    for t in range(grid.ticks - 1, -1, -1):
        nxt = _tick(grid, t, nxt, inf, choices)
    return Plan(float(nxt[0][0][grid.units]), grid.q, grid.ticks, grid.levels, choices)


def _tick(
    grid: _Grid,
    t: int,
    nxt: Values,
    inf: npt.NDArray[np.float64],
    choices: npt.NDArray[np.int8] | None,
) -> Values:
    """V at the start of tick ``t`` from V at ``t + 1`` (``nxt``); the argmin into ``choices``."""
    gap, nz, levels = grid.gap, grid.nz, grid.levels
    tick_len = gap if t < grid.full else grid.rem
    # only w in [lo, hi] matters: more work than that cannot be left after t ticks,
    # and less time than that is left for it (∞ above hi)
    lo = max(0, grid.units - t * grid.per_tick)
    hi = min(grid.units, math.ceil((grid.deadline_s - t * gap) / grid.q - EPS_S))
    if hi < lo:
        hi = lo
    running = [1] + [2 + z for z in range(nz) if grid.avail[z, t]]
    cost = {1: grid.od_cost} | {2 + z: grid.prices[z, t] * gap / 3600.0 for z in range(nz)}
    sw_credit, sw_level = grid.step(grid.d, tick_len)
    rows = [nxt[0][0][lo : hi + 1]] + [
        cost[c] + _shift(nxt[c][sw_level], sw_credit, lo, hi) for c in running
    ]
    stack = np.stack(rows)
    arg1 = np.argmin(stack, axis=0)
    best1 = np.take_along_axis(stack, arg1[None], 0)[0]
    stack2 = stack.copy()
    np.put_along_axis(stack2, arg1[None], np.inf, 0)
    arg2 = np.argmin(stack2, axis=0)
    best2 = np.take_along_axis(stack2, arg2[None], 0)[0]
    codes = np.array([0, *running], dtype=np.int8)
    cur = [[inf] * levels for _ in range(grid.ntypes)]
    cur[0] = [_widen(best1, lo, inf)] * levels
    if choices is not None:
        choices[t, 0, :, lo : hi + 1] = codes[arg1]
    for row, c in enumerate(running, start=1):
        without_c = np.where(arg1 == row, best2, best1)
        without_code = np.where(arg1 == row, codes[arg2], codes[arg1])
        for k in range(levels):
            credit, level = grid.step(grid.pending[k], tick_len)
            stay = cost[c] + _shift(nxt[c][level], credit, lo, hi)
            take_stay = stay <= without_c
            cur[c][k] = _widen(np.where(take_stay, stay, without_c), lo, inf)
            if choices is not None:
                choices[t, c, k, lo : hi + 1] = np.where(take_stay, c, without_code)
    for z in range(nz):
        if not grid.avail[z, t]:  # last ran spot there, but the instance is gone
            cur[2 + z] = cur[0]
            if choices is not None:
                choices[t, 2 + z] = choices[t, 0]
    return cur


@register
class OptimalPolicy(Policy):
    """The offline oracle: the cheapest schedule that meets the deadline, knowing the whole trace.

    Why: it is the floor — no online policy can do better on the same run, so
    a policy's cost is judged by how much of the gap between Uniform Progress
    and this floor it closes. Example (52 h deadline, one 6 h outage at hour
    10): it runs on-demand through exactly as much of the outage as the slack
    cannot absorb, pays two restarts for it, and is on spot everywhere else —
    something no online policy can know to do before the outage ends.
    If the deadline cannot be met at all it runs on-demand from the start.
    """

    name = "optimal"
    online = False

    def __init__(self) -> None:
        self.plan: Plan | None = None

    def prepare(self, window: Window, setting: JobSetting) -> None:
        """See the whole window before the run (only the oracle may)."""
        self.plan = solve(window, setting, keep_choices=True)

    def decide(self, state: DeadlineState) -> Decision:
        plan = self.plan
        if plan is None or not plan.feasible or plan.choices is None:
            return ON_DEMAND
        t = round(state.elapsed_s / state.tick_s)
        if t >= plan.ticks:
            return ON_DEMAND
        last = state.last
        row = 0 if last.kind is Kind.NONE else 1 if last.kind is Kind.ON_DEMAND else 2 + last.zone
        level = 0
        if state.pending_overhead_s > EPS_S:
            level = round((state.restart_overhead_s - state.pending_overhead_s) / state.tick_s)
        w = round(state.work_left_s / plan.quantum_s)
        code = int(plan.choices[t, row, level, w])
        if code == 0:
            return IDLE
        if code == 1:
            return ON_DEMAND
        return Decision(Kind.SPOT, code - 2)
