"""``spothop``: an expected-cost plan over how spot runs and outages end, replayed as a lookup.

The model: each tick spot is *up* for 1, 2, … ticks so far, or *down* for 1,
2, … ticks so far. Spot up k ticks drops at the next tick with odds q_k; an
outage k ticks old ends at the next tick with odds r_k (the last age stands
for every older one). The odds are a :class:`MarketPrior` counted on whole
spot traces (:func:`fit_prior`; the default on the eight 2022 us-west-2
traces, 10 min ticks); at other tick lengths the ages are counted in time
(:meth:`MarketPrior.at_tick`). Both are heavy-tailed, and that is what the plan uses:

- outages: r = 0.34, 0.22, 0.16, 0.16, 0.11, 0.11, 0.09 for 1 … 7 ticks, then
  0.037 per tick: a third end after one tick, but one that has lasted 80 min
  is expected to last another 4.5 h;
- spot that came back: q = 0.47, 0.22, 0.16, 0.16, 0.17, 0.09, 0.13, then
  0.029 per tick: half the time it is gone again after one tick, but once up
  80 min it is expected to stay almost 6 h (a single drop rate, 0.103, as the
  previous plan had, gets both ends wrong: modelling the age of the up run
  took the bench's mean cost from 95.32 to 94.93).

With several zones spot runs in the zone that is up (the one running, else the
cheapest); spot that is up is that zone's run (its age: a drop there costs a
restart even while another zone is up), and an outage is "spot nowhere" (the
union's run: it ends when any zone comes back).

The programme: V_τ(last, spot state, w) = least *expected* money to finish w
(the work left plus restart overhead still owed, in fifths of a tick) by the
deadline, choosing NONE, ON_DEMAND or SPOT (when up) each tick; a choice
different from what ran last owes the restart overhead as extra work. It is
solved backward over the whole job once per (setting, prices, odds) and
cached, so every job in the same setting shares it and a decision is a pure
function of the :class:`DeadlineState` (a controller may make a fresh policy
each pass). The rules it yields, and why (bench/policies.py, docs/simulate.md):

1. **Wait out a young outage, pay for an old one.** Idling costs slack,
   on-demand costs $3.06/h against spot's $0.97/h plus two restarts; since a
   third of outages end within a tick, the plan idles through the first ticks
   of an outage while the slack covers the expected rest, and goes on-demand
   once the outage is old enough that it will likely last hours (52 h
   deadline, 3 h of slack: idle at 10 min, on-demand at 80 min; a test).
2. **Stop waiting when the slack no longer covers the expected outage**: the
   older the outage and the smaller the slack, the sooner on-demand.
3. **Hysteresis**: back from on-demand to spot only when the expected saving
   beats the restart and the room it takes — spot that has just come back is
   gone again after a tick half the time, so with little slack the plan waits
   until it has stayed up, or stays on on-demand (a later preemption would
   cost a restart it cannot pay back).
4. **Room for one more restart**: a launch of or a move to spot needs
   ⌈(W+2d)/gap⌉ < ⌊(D−t)/gap⌋; otherwise on-demand (the safety rule could keep a
   spot instance that is then preempted, losing a tick it cannot give back).
5. **Charge a switch more than one restart** while a restart is short against a
   tick (``restart_weight``, fitted: 2, counted in ticks by
   :func:`planned_overhead_s`). Preemptions cluster: on the eight traces, after
   spot that stayed up a single tick the next up run also lasts a single
   tick 61 % of the time, after a longer one 35 % (47 % overall). The
   run-age model forgets each run once it ends, so in a flapping spell it
   expects fewer of the restarts still to come than come, and spends slack
   it will need: the runs where it lost most to the optimum were all 52 h
   deadlines with 0.1 h restarts in flapping spot (on the worst, $115.02
   against the optimum's $69.87: idle and switching through two hours of
   flapping, then on-demand for the last 20 h once the slack was gone).
   The plan charges a switch d · (1 + (weight − 1) · max(0, 1 − d/tick)) of
   work (the true d everywhere that guards the deadline: rule 4 and the
   safety rule): with 10 min ticks 1.88 d at 0.02 h restarts, 1.7 d at 0.05 h,
   1.4 d at 0.1 h; a restart of a tick or more is charged once, since a
   one-tick run then credits nothing in the plan already and the extra charge
   only kept the plan off spot that stays up (as a plain multiple, 1.5 × d,
   fitted on 10 min ticks, it cost GCP's 150 s ticks with 0.1 h restarts,
   2.4 ticks, 1 % against Uniform Progress, and europe-west4-a, up in every
   tick, went from $15.65 to $15.79 a run: on-demand first, then a second
   restart to move to spot). bench/policies.py chooses the weight from 1,
   1.5, 2, 2.5 on the traces it fits on (all eight choose 2, and each
   held-out fold on the other zone's four); the bench's mean went from
   94.93 without the weight to 94.57 fit, and 95.05 to 94.62 held out.
6. The safety rule (SIMULATION.md) wraps it all, so the deadline holds whatever
   the model believes; tests/scheduler/policies/test_safety_property.py checks
   it over random traces, ticks, tasks, overheads and restart weights.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Sequence
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

QUANTA_PER_TICK = 5  # work is tracked in fifths of a tick: coarse, and the programme interpolates
ODDS_STEP = 0.01  # estimates are rounded to this before planning, so similar markets share a plan
PLANS_KEPT = 64
PRIOR_TICK_S = 600.0  # the prior's odds are per 10 min tick, the 2022 AWS traces' gap
PRIOR_AGES = 8  # recovery odds for outages 1 … 7 ticks old and one for every older one
MAX_AGES = 64  # ages the plan tells apart at short ticks (the prior's 80 min is 32 at 150 s)
MISS_PENALTY_USD = (
    1e6  # finishing after the deadline: the safety rule prevents it; the model must too
)
NONE_CODE, OD_CODE, SPOT_CODE = 0, 1, 2
_ROWS = {Kind.NONE: NONE_CODE, Kind.ON_DEMAND: OD_CODE, Kind.SPOT: SPOT_CODE}  # what ran last

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class _Key:
    ticks: int
    work_units: int
    quantum_s: float
    tick_s: float
    overhead_s: float
    drops: tuple[float, ...]  # odds that spot up 1, 2, … ticks (the last: or longer) drops next
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
    ups, downs = len(key.drops), len(key.recovery)
    out = np.zeros((ups + downs, ups + downs))
    for k, q in enumerate(key.drops):  # up for k + 1 ticks
        out[k, ups] = q
        out[k, min(k + 1, ups - 1)] += 1 - q
    for k, r in enumerate(key.recovery):  # down for k + 1 ticks
        out[ups + k, 0] = r
        out[ups + k, ups + min(k + 1, downs - 1)] += 1 - r
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
        col0 = max(0, lo - per_tick - 1)
        last_col = min(length, hi + spill)
        expect = moves @ values[:, :, col0:last_col]  # [next kind, state now, w − col0]
        width = last_col - col0
        base = np.arange(lo, hi + 1) - col0
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

        every, up, ups = slice(None), slice(0, len(key.drops)), len(key.drops)
        idle = expect[NONE_CODE][:, base]
        od_stay = key.od_cost + after(OD_CODE, 0, every)
        od_start = key.od_cost + after(OD_CODE, 1, every)
        spot_stay = key.spot_cost + after(SPOT_CODE, 0, up)
        spot_start = key.spot_cost + after(SPOT_CODE, 1, up)
        code = np.zeros((3, states, hi - lo + 1), np.int8)
        new = buffers[tau % 2]
        for last, od in ((NONE_CODE, od_start), (OD_CODE, od_stay)):
            best = np.minimum(idle, od)
            code[last] = np.where(od < idle, OD_CODE, NONE_CODE)
            take_spot = spot_start < best[up]
            best[up] = np.where(take_spot, spot_start, best[up])
            code[last, up] = np.where(take_spot, SPOT_CODE, code[last, up])
            new[last, :, lo : hi + 1] = best
        best_up = np.minimum(idle[up], od_start[up])
        code[SPOT_CODE, up] = np.where(od_start[up] < idle[up], OD_CODE, NONE_CODE)
        take_spot = spot_stay < best_up
        new[SPOT_CODE, up, lo : hi + 1] = np.where(take_spot, spot_stay, best_up)
        code[SPOT_CODE, up] = np.where(take_spot, SPOT_CODE, code[SPOT_CODE, up])
        new[SPOT_CODE, ups:] = new[NONE_CODE, ups:]  # spot that ran is gone in an outage
        code[SPOT_CODE, ups:] = code[NONE_CODE, ups:]
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


def planned_overhead_s(overhead_s: float, tick_s: float, restart_weight: float) -> float:
    """The work the plan charges a switch (rule 5): ``restart_weight`` restart overheads while
    a restart is short against a tick, fading linearly to one overhead as it reaches a tick.

    Why in ticks: the weight stands for the restarts of a flapping spell (spot back for a
    tick, then gone) that the run-age model does not see coming, and what such a restart
    costs the plan depends on how much of a tick it eats. With a restart of a tick or more
    a one-tick run credits nothing in the plan already, so the plan does not chase flapping
    spot there and the extra charge only makes it shun spot that stays up: fitted as a plain
    multiple on 10 min ticks (d at most 0.6 of a tick), 1.5 cost GCP's 150 s ticks
    (d up to 2.4 ticks) 1 % against Uniform Progress. Counted in ticks the same weight
    carries across tick lengths; the trace's own overhead is charged in full everywhere
    that guards the deadline.
    """
    extra = (restart_weight - 1.0) * max(0.0, 1.0 - overhead_s / tick_s)
    return overhead_s * (1.0 + extra)


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


@dataclass(frozen=True)
class MarketPrior:
    """What spothop believes of a spot market: the odds per :data:`PRIOR_TICK_S` tick that spot
    that is up drops, and that an outage 1, 2, … ticks old (the last for every older one) ends.
    Fitted on traces with :func:`fit_prior`; nothing in it names a trace or a window."""

    drop_odds_by_age: tuple[float, ...]
    recovery_odds_by_age: tuple[float, ...]

    def at_tick(self, tick_s: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The odds per tick of ``tick_s`` that spot up (an outage) 1, 2, … ticks old ends at
        the next tick, with ages in time: a run k ticks old is k·tick old, and its odds are the
        prior's hazard over [k·tick, (k+1)·tick) (the prior's odds for age j hold over
        [j, j+1) × :data:`PRIOR_TICK_S`, its first age also before that, its last after). At
        :data:`PRIOR_TICK_S` they are the prior's own. Why: with ages counted in ticks, 150 s
        ticks read a 20 min outage as the prior's "80 min and older", and 300 s ticks waited
        through outages the prior calls long (AWS 4-node ×3: 47.68 against Uniform Progress's
        47.60; in time, 47.55)."""
        return _per_tick(self.drop_odds_by_age, tick_s), _per_tick(
            self.recovery_odds_by_age, tick_s
        )


def _per_tick(odds: tuple[float, ...], tick_s: float) -> tuple[float, ...]:
    """:meth:`MarketPrior.at_tick` for one column: ⌈len · PRIOR_TICK_S / tick⌉ ages (at most
    :data:`MAX_AGES`), the last for every older run."""
    rates = [-math.log1p(-min(q, 1.0 - 1e-9)) / PRIOR_TICK_S for q in odds]
    ages = max(1, min(MAX_AGES, math.ceil(len(odds) * PRIOR_TICK_S / tick_s - EPS_S)))
    out = []
    for k in range(1, ages + 1):
        t, end, hazard = k * tick_s, (k + 1) * tick_s, 0.0
        while t < end - EPS_S:
            piece = int(t // PRIOR_TICK_S)  # the prior's age ``piece`` holds over this span
            upto = min(end, (piece + 1) * PRIOR_TICK_S)
            hazard += (upto - t) * rates[min(max(piece, 1), len(rates)) - 1]
            t = upto
        out.append(-math.expm1(-hazard))
    return tuple(out)


def _ending_odds(traces: Sequence[npt.NDArray[np.bool_]], value: bool) -> tuple[float, ...]:
    """Odds that a run of ``value`` ticks k ticks old (1 … PRIOR_AGES, the last for every older
    one) ends at the next tick, counted over every run of every trace (a run cut by a trace's
    end is at risk, never ended)."""
    at_risk = [0.0] * PRIOR_AGES
    ended = [0.0] * PRIOR_AGES
    for flags in traces:
        mine = np.asarray(flags, dtype=bool) == value
        edges = np.flatnonzero(np.diff(np.concatenate([[0], mine.astype(np.int8), [0]])))
        for begin, end in zip(edges[::2], edges[1::2], strict=True):
            length, closed = int(end - begin), end < len(mine)
            for age in range(1, PRIOR_AGES):
                if length >= age:
                    at_risk[age - 1] += 1
                    ended[age - 1] += closed and length == age
            at_risk[-1] += max(length - PRIOR_AGES + 1, 0)
            ended[-1] += closed and length >= PRIOR_AGES
    return tuple(float(e / r) if r else 1.0 for e, r in zip(ended, at_risk, strict=True))


def fit_prior(traces: Sequence[npt.NDArray[np.bool_]]) -> MarketPrior:
    """The pooled odds of whole availability traces at :data:`PRIOR_TICK_S` ticks (True = up):
    spot up k ticks drops at the next tick; an outage k ticks old ends at the next tick."""
    return MarketPrior(_ending_odds(traces, True), _ending_odds(traces, False))


@functools.lru_cache(maxsize=1024)
def _key_of(
    prior: MarketPrior,
    restart_weight: float,
    tick_s: float,
    deadline_s: float,
    task_s: float,
    overhead_s: float,
    spot_price: float,
    od_price: float,
) -> _Key:
    """The plan's key for a setting: the same for every decision of a job (and of every job in
    the setting), so it is made once, not per tick (it rounds sixteen odds)."""
    q = tick_s / QUANTA_PER_TICK
    drops, recovery = prior.at_tick(tick_s)
    return _Key(
        ticks=max(1, math.floor(deadline_s / tick_s + EPS_S)),
        work_units=math.ceil(task_s / q - EPS_S),
        quantum_s=q,
        tick_s=tick_s,
        overhead_s=planned_overhead_s(overhead_s, tick_s, restart_weight),
        drops=tuple(_odds(q) for q in drops),
        recovery=tuple(_odds(r) for r in recovery),
        spot_cost=round(spot_price * tick_s / 3600.0, 6),
        od_cost=round(od_price * tick_s / 3600.0, 6),
    )


@register
class SpothopPolicy(Policy):
    """Spend slack where the market's odds say it buys the most; the default with a deadline.

    Why: Uniform Progress pays for on-demand whenever it falls behind a straight
    line, however soon spot is likely to return, and stays on on-demand until it
    is two restarts ahead; greedy waits for spot however long outages last. Both
    ignore what the controller knows: how long spot runs and outages last at
    each age. This policy plans on exactly that (module
    docstring), so in a market whose outages are mostly short blips it idles
    through a fresh outage and goes on-demand only once it has lasted long
    enough to be a long one — while in a market that is rarely up it runs
    on-demand through outages from the start and keeps its slack for the end.

    What it reads of the episode: whether spot is up now, what ran last, and how
    long spot has been up or down so far (``up_for_s``/``down_for_s``; with several
    zones, how long the zone it runs spot in has been up, or how long spot has been down
    everywhere). The odds are the prior's (:class:`MarketPrior`, fitted on the shared
    traces; ``prior`` overrides it, as the held-out bench does); ``restart_weight`` is how many
    restart overheads the plan charges a switch while a restart is short against a tick (module
    docstring, rule 5; fitted the same way). Example (52 h
    deadline, 48 h task, d = 0.02 h, 10 h in with 39 h of work left): spot …
    gone: idle (one tick old), still gone at 80 min: on-demand until spot is
    back, then spot again.
    """

    name = "spothop"
    uses_estimates = True

    def __init__(
        self, prior: MarketPrior | None = None, restart_weight: float | None = None
    ) -> None:
        self.prior = prior or DEFAULT_PRIOR
        self.restart_weight = DEFAULT_RESTART_WEIGHT if restart_weight is None else restart_weight
        if not (math.isfinite(self.restart_weight) and self.restart_weight >= 1.0):
            raise ValueError(f"restart_weight must be at least 1, not {self.restart_weight!r}")

    def _evidence(self, state: DeadlineState, zone: int | None) -> ZoneView:
        """Whose run the plan reads (module docstring): up, the zone spot runs or would run in;
        down, "spot nowhere" (the union's outage)."""
        if zone is not None:
            return state.zones[zone]
        if len(state.zones) > 1 and state.any_zone is not None:
            return state.any_zone
        return state.zones[0]

    def _key(self, state: DeadlineState) -> _Key:
        zone = state.best_available_zone()
        spot_price = (
            state.zones[zone].price_usd_per_hour
            if zone is not None
            else min(z.price_usd_per_hour for z in state.zones)
        )
        return _key_of(
            self.prior,
            self.restart_weight,
            state.tick_s,
            state.deadline_s,
            state.task_s,
            state.restart_overhead_s,
            spot_price,
            state.on_demand_price_usd_per_hour,
        )

    def decide(self, state: DeadlineState) -> Decision:
        plan = _plan(self._key(state))
        tau = round(state.elapsed_s / state.tick_s)
        if tau >= len(plan.choices):
            return ON_DEMAND
        zone = _zone(state)
        ups, downs = len(plan.key.drops), len(plan.key.recovery)
        evidence = self._evidence(state, zone)
        if zone is not None:  # up for 1, 2, … ticks, then down for 1, 2, … (module docstring)
            spot_state = min(ups, max(1, round(evidence.up_for_s / state.tick_s))) - 1
        else:
            spot_state = ups + min(downs, max(1, round(evidence.down_for_s / state.tick_s))) - 1
        last = state.last.kind
        if last is Kind.SPOT and not state.spot_running:
            last = Kind.NONE
        row = _ROWS[last]
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


# fit_prior on the eight 2022 us-west-2 traces (bench/policies.py prints it; a test checks it)
DEFAULT_PRIOR = MarketPrior(
    drop_odds_by_age=(0.4716, 0.2178, 0.1582, 0.1582, 0.1655, 0.0938, 0.1331, 0.0286),
    recovery_odds_by_age=(0.3362, 0.2209, 0.162, 0.1601, 0.1061, 0.1066, 0.0946, 0.0368),
)

# the restart weight bench/policies.py chooses on the eight 2022 us-west-2 traces (rule 5;
# counted in ticks by planned_overhead_s)
DEFAULT_RESTART_WEIGHT = 2.0
