"""``spothop``: plan against the market's own statistics — an expected-cost programme over a
model of spot fitted from the history an online controller has.

The model: each tick spot is *up*, or *down* for 1, 2, …, A ticks so far. Up
is followed by down with the zone's preemption odds per tick; an outage k
ticks old ends at the next tick with the recovery odds the history shows for
outages of that age (heavy-tailed in every published trace: a fresh outage
often ends within a tick or two, one that has lasted an hour usually lasts
hours). With several zones the model is "spot somewhere", from the union of
the zones' histories, and spot runs in the zone that is up (the one running,
else the cheapest).

The programme: V_τ(last, spot state, w) = least *expected* money to finish w
(the work left plus restart overhead still owed, in quanta) by the deadline,
choosing NONE, ON_DEMAND or SPOT (when up) each tick; a choice different from
what ran last owes the restart overhead as extra work. It is solved backward
once, when the job starts (cached across jobs with the same estimates), and
replayed: the decision for (tick, last, state, w) is a table lookup. The safety
rule still wraps it, so the deadline holds whatever the model believes.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from spothop.scheduler.policies.base import (
    EPS_S,
    IDLE,
    ON_DEMAND,
    DeadlineState,
    Decision,
    Kind,
    Policy,
    ZoneView,
    register,
)
from spothop.scheduler.policies.uniform_progress import UniformProgressPolicy

QUANTA_PER_TICK = 5  # work is tracked in fifths of a tick: coarse, and the programme interpolates
ODDS_STEP = 0.01  # estimates are rounded to this before planning, so similar markets share a plan
PLANS_KEPT = 32
MISS_PENALTY_USD = (
    1e6  # finishing after the deadline: the safety rule prevents it; the model must too
)
NONE_CODE, OD_CODE, SPOT_CODE = 0, 1, 2

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class _Key:
    ticks: int
    work_units: int
    quantum_s: float
    tick_s: float
    overhead_s: float
    p_drop: float
    recovery: tuple[float, ...]
    spot_cost: float
    od_cost: float


@dataclass
class _Plan:
    key: _Key
    choices: list[npt.NDArray[np.int8]]  # per tick: [last, state, w] → code (band only)
    lows: list[int]


def _odds(value: float) -> float:
    return min(1.0, max(ODDS_STEP, round(value / ODDS_STEP) * ODDS_STEP))


def _transitions(key: _Key) -> FloatArray:
    """Odds of the next tick's spot state given this one's (0 up, k down k ticks)."""
    ages = len(key.recovery)
    out = np.zeros((1 + ages, 1 + ages))
    out[0, 0], out[0, 1] = 1 - key.p_drop, key.p_drop
    for k, r in enumerate(key.recovery, start=1):
        out[k, 0] = r
        out[k, min(k + 1, ages)] += 1 - r
    return out


def _solve(key: _Key) -> _Plan:
    """Backward over ticks, vectorised over spot states and work (module docstring)."""
    q, gap, d = key.quantum_s, key.tick_s, key.overhead_s
    moves = _transitions(key)
    states = moves.shape[0]
    top = key.work_units + math.ceil(d / q) + 2
    length = top + 2
    # two buffers, written in turn: a tick writes only its band [lo, hi] and reads only
    # [lo(τ+1), hi(τ+1) + overhead] of the other, so nothing stale is ever read
    buffers = [np.full((3, states, length), MISS_PENALTY_USD) for _ in range(2)]
    for buffer in buffers:
        buffer[:, :, 0] = 0.0
    values = buffers[0]
    spill = math.ceil(d / q) + 2
    choices: list[npt.NDArray[np.int8]] = [np.zeros((0, 0, 0), np.int8)] * key.ticks
    lows = [0] * key.ticks
    per_tick = round(gap / q)
    credits = (gap / q, (gap - d) / q)  # staying on what ran, or (re)starting

    for tau in range(key.ticks - 1, -1, -1):
        lo = max(0, key.work_units - tau * per_tick - 1)
        hi = max(lo, min(top, math.floor((key.ticks - tau) * gap / q) + 1))
        first = max(0, lo - per_tick - 1)
        last_col = min(length, hi + spill)
        expect = moves @ values[:, :, first:last_col]  # [next kind, state now, w − first]
        width = last_col - first
        base = np.arange(lo, hi + 1) - first
        reads: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], float]] = []
        for credit in credits:
            whole = math.floor(credit)
            frac = credit - whole
            idx = np.clip(base - whole, 0, width - 1)
            reads.append((idx, np.clip(idx - 1, 0, width - 1), frac))

        def after(
            kind: int, read: int, rows: slice, expect: FloatArray = expect, reads: list[Any] = reads
        ) -> FloatArray:
            """expect[kind, rows] at w − credit (interpolated between whole quanta)."""
            idx, below, frac = reads[read]
            out: FloatArray = expect[kind, rows][:, idx]
            if frac > 1e-9:
                out = (1 - frac) * out + frac * expect[kind, rows][:, below]
            return out

        every, up = slice(None), slice(0, 1)
        idle = expect[NONE_CODE][:, base]
        od_stay = key.od_cost + after(OD_CODE, 0, every)
        od_start = key.od_cost + after(OD_CODE, 1, every)
        spot_stay = key.spot_cost + after(SPOT_CODE, 0, up)[0]
        spot_start = key.spot_cost + after(SPOT_CODE, 1, up)[0]
        code = np.zeros((3, states, hi - lo + 1), np.int8)
        new = buffers[tau % 2]
        for last, od in ((NONE_CODE, od_start), (OD_CODE, od_stay)):
            best = np.minimum(idle, od)
            code[last] = np.where(od < idle, OD_CODE, NONE_CODE)
            take_spot = spot_start < best[0]
            best[0] = np.where(take_spot, spot_start, best[0])
            code[last, 0] = np.where(take_spot, SPOT_CODE, code[last, 0])
            new[last, :, lo : hi + 1] = best
        best_up = np.minimum(idle[0], od_start[0])
        code[SPOT_CODE, 0] = np.where(od_start[0] < idle[0], OD_CODE, NONE_CODE)
        take_spot = spot_stay < best_up
        new[SPOT_CODE, 0, lo : hi + 1] = np.where(take_spot, spot_stay, best_up)
        code[SPOT_CODE, 0] = np.where(take_spot, SPOT_CODE, code[SPOT_CODE, 0])
        new[SPOT_CODE, 1:] = new[NONE_CODE, 1:]  # spot that ran is gone in an outage
        code[SPOT_CODE, 1:] = code[NONE_CODE, 1:]
        new[:, :, 0] = 0.0
        values = new
        choices[tau] = code
        lows[tau] = lo
    return _Plan(key, choices, lows)


_PLANS: OrderedDict[_Key, _Plan] = OrderedDict()


def _plan(key: _Key) -> _Plan:
    plan = _PLANS.get(key)
    if plan is None:
        plan = _solve(key)
        _PLANS[key] = plan
        if len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)
    else:
        _PLANS.move_to_end(key)
    return plan


def _zone(state: DeadlineState) -> int | None:
    """Where to run spot now: the zone running, else the cheapest open one, calmer first on a tie."""
    if state.spot_running:
        return state.last.zone
    open_zones = [i for i, z in enumerate(state.zones) if z.available]
    if not open_zones:
        return None

    def rank(i: int) -> tuple[float, float, int]:
        zone = state.zones[i]
        odds = zone.preemption_odds_per_tick
        return (zone.price_usd_per_hour, 1.0 if odds is None else odds, i)

    return min(open_zones, key=rank)


@register
class SpothopPolicy(Policy):
    """Spend slack where the market's history says it buys the most; the default with a deadline.

    Why: Uniform Progress pays for on-demand whenever it falls behind a straight
    line, however soon spot is likely to return, and stays on on-demand until it
    is two restarts ahead; greedy waits for spot however long outages in this
    market last. Both ignore what the controller knows: how often this market
    preempts and how long its outages run at each age. This policy plans on
    exactly that (module docstring) and so, in a market whose outages are
    mostly short blips, idles through a fresh outage and goes on-demand only
    once it has lasted long enough to be a long one — while in a market that is
    rarely up it runs on-demand through outages from the start and keeps its
    slack for the end. Example (52 h deadline, a market whose outages end
    within a tick half the time but last 3 h once an hour old): spot … outage:
    idle, idle (a blip, most likely), still down: on-demand until spot is back,
    then spot at once if the plan says the saving beats the restart.
    Before the market has a history it decides like Uniform Progress.
    """

    name = "spothop"
    uses_estimates = True

    def __init__(self) -> None:
        self._fallback = UniformProgressPolicy()
        self._plan: _Plan | None = None
        self._t0 = 0

    def _evidence(self, state: DeadlineState) -> ZoneView:
        if len(state.zones) > 1 and state.any_zone is not None:
            return state.any_zone
        return state.zones[0]

    def _key(self, state: DeadlineState, evidence: ZoneView) -> _Key:
        q = state.tick_s / QUANTA_PER_TICK
        zone = state.best_available_zone()
        spot_price = (
            state.zones[zone].price_usd_per_hour
            if zone is not None
            else min(z.price_usd_per_hour for z in state.zones)
        )
        assert evidence.preemption_odds_per_tick is not None
        return _Key(
            ticks=max(1, state.ticks_left()),
            work_units=math.ceil((state.work_left_s + state.pending_overhead_s) / q - EPS_S),
            quantum_s=q,
            tick_s=state.tick_s,
            overhead_s=state.restart_overhead_s,
            p_drop=_odds(evidence.preemption_odds_per_tick),
            recovery=tuple(_odds(r) for r in evidence.recovery_odds_by_age),
            spot_cost=round(spot_price * state.tick_s / 3600.0, 6),
            od_cost=round(state.on_demand_price_usd_per_hour * state.tick_s / 3600.0, 6),
        )

    def decide(self, state: DeadlineState) -> Decision:
        evidence = self._evidence(state)
        if evidence.preemption_odds_per_tick is None or not evidence.recovery_odds_by_age:
            return self._fallback.decide(state)
        tick = round(state.elapsed_s / state.tick_s)
        if self._plan is None:
            self._plan = _plan(self._key(state, evidence))
            self._t0 = tick
        plan = self._plan
        tau = tick - self._t0
        if tau >= len(plan.choices):
            return ON_DEMAND
        zone = _zone(state)
        ages = len(plan.key.recovery)
        spot_state = (
            0 if zone is not None else min(ages, max(1, round(evidence.down_for_s / state.tick_s)))
        )
        last = state.last.kind
        if last is Kind.SPOT and not state.spot_running:
            last = Kind.NONE
        row = {Kind.NONE: NONE_CODE, Kind.ON_DEMAND: OD_CODE, Kind.SPOT: SPOT_CODE}[last]
        w = round((state.work_left_s + state.pending_overhead_s) / plan.key.quantum_s)
        table = plan.choices[tau]
        offset = min(max(w - plan.lows[tau], 0), table.shape[2] - 1)
        code = int(table[row, spot_state, offset])
        if code == SPOT_CODE and zone is not None:
            if not state.spot_running and state.ticks_needed(2) >= state.ticks_left():
                # A launch or a move to spot must leave room for one more restart: spot
                # taken away at the next boundary would otherwise cost a tick the safety
                # rule (which keeps spot, then finds it gone) cannot give back.
                return ON_DEMAND
            return Decision(Kind.SPOT, zone)
        if code == OD_CODE:
            return ON_DEMAND
        return IDLE
