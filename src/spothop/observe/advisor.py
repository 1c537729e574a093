"""The advisor: should this job run on spot, and how? A Monte Carlo over the candidate markets.

The contract:

1. **Inputs are the scheduler's.** The candidates come from
   :func:`spothop.scheduler.rank` over the same view ``spothop plan`` builds
   (prices, λ from spothop's interruption history or the priors, boot time),
   the job's checkpoint interval and save cost, and the restart overhead
   (:class:`~spothop.scheduler.placement.WorkProfile`). ``work_h`` is the
   useful hours of work each node has to do (a job file does not say).
2. **One model of a run** (:func:`simulate_run`): a node boots (``boot_s``,
   paid), then works in segments of ``τ`` seconds of work followed by a
   ``C``-second save (the last segment has no save). Preemptions arrive as a
   Poisson process of rate λ over the market's running time; one within a
   segment loses that segment's work, and the replacement pays ``boot_s +
   restart_s`` before work resumes from the last checkpoint. The market that
   preempted is cooled for :data:`COOLDOWN_S`, and the job's tolerance policy
   (:mod:`spothop.scheduler.tolerance`, the controller's own code) picks the
   next market from what is not cooling, with the interruption times it has
   seen, so ``balanced`` moves to on-demand after repeated interruptions.
   Cost is every paid second times the price in force; the finish time is the
   wall time to the last node's last save. Nodes run independently.
3. **Options** (:func:`advise`): on-demand (best on-demand candidate), spot at
   each tolerance, and reserved plus spot (the reserved pools first, the rest
   on spot, ``balanced``) when the job has pools or a reserved rate is given.
   Each has the mean, p10 and p90 of cost (integer micro-dollars) and finish
   time over ``runs`` runs, from one seeded generator: the same inputs give
   the same advice.
4. **The recommendation** is the option with the lowest mean cost whose p90
   finish time meets the job's deadline (all of them if it has none), with
   why; when on-demand wins it says "use on-demand" and what spot would cost.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spothop.bounds import HOURS, PRICE_USD_PER_HOUR
from spothop.errors import ConfigError
from spothop.observe.billing import usd
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.scheduler.tolerance import Situation, policies

COOLDOWN_S = 1800.0  # the controller cools a market that preempted for 30 minutes
DEFAULT_RUNS = 500
DEFAULT_SEED = 7
SECONDS_PER_HOUR = 3600.0
MAX_INTERRUPTIONS_PER_RUN = 10_000  # a market so stormy no run ends: the run is cut here


@dataclass(frozen=True)
class MarketModel:
    """One candidate market as the simulation sees it."""

    label: str
    kind: str  # spot | on-demand | reserved
    price_usd_per_hour: float
    preemption_rate_per_h: float
    interval_s: float
    save_s: float
    restart_s: float
    boot_s: float

    @classmethod
    def of(cls, c: Candidate, price_usd_per_hour: float | None = None) -> MarketModel:
        f = c.factors
        return cls(
            label=f"{c.market_id.slug} ({c.market_kind.value})",
            kind=c.market_kind.value,
            price_usd_per_hour=c.price_usd_per_hour
            if price_usd_per_hour is None
            else price_usd_per_hour,
            preemption_rate_per_h=c.preemption_rate_per_h if c.spot else 0.0,
            interval_s=max(1.0, f.get("checkpoint_interval_s", 1800.0)),
            save_s=f.get("save_s", 0.0),
            restart_s=f.get("restart_s", 0.0),
            boot_s=f.get("boot_s", 0.0),
        )


@dataclass(frozen=True)
class RunOutcome:
    """One simulated run of one node: paid micro-dollars, wall seconds, interruptions."""

    cost_microusd: int
    finish_s: float
    interruptions: int


def _micro(price_usd_per_hour: float, seconds: float) -> float:
    return price_usd_per_hour * 1e6 * seconds / SECONDS_PER_HOUR


class _Chooser:
    """Which market the job runs on next: the tolerance policy over the markets not cooling."""

    def __init__(
        self,
        spot: Sequence[Candidate],
        on_demand: Sequence[Candidate],
        tolerance: str | None,
        models: dict[int, MarketModel],
    ) -> None:
        self.spot, self.on_demand, self.models = list(spot), list(on_demand), models
        self.policy = policies()[tolerance] if tolerance else None

    def pick(self, now: float, cooled: dict[int, float], seen: list[float]) -> MarketModel | None:
        spot = [c for c in self.spot if cooled.get(id(c), -math.inf) <= now]
        if self.policy is None:
            pool = spot or self.on_demand
            return self.models[id(pool[0])] if pool else None
        choice = self.policy.choose(spot, self.on_demand, Situation(now, tuple(seen)))
        return self.models[id(choice.candidates[0])] if choice.candidates else None


def simulate_run(
    first: MarketModel,
    work_s: float,
    rng: random.Random,
    chooser: _Chooser | None = None,
) -> RunOutcome:
    """One node's run (the module's model, item 2); ``chooser`` None: every relaunch on ``first``."""
    market = first
    now = market.boot_s
    cost = _micro(market.price_usd_per_hour, market.boot_s)
    saved = 0.0
    seen: list[float] = []
    cooled: dict[int, float] = {}
    by_model = {id(m): k for k, m in (chooser.models.items() if chooser else ())}
    while saved < work_s - 1e-9:
        step = min(market.interval_s, work_s - saved)
        last = saved + step >= work_s - 1e-9
        segment = step + (0.0 if last else market.save_s)
        rate_per_s = market.preemption_rate_per_h / SECONDS_PER_HOUR
        hit = rng.expovariate(rate_per_s) if rate_per_s > 0 else math.inf
        if hit >= segment:
            now += segment
            cost += _micro(market.price_usd_per_hour, segment)
            saved += step
            continue
        now += hit
        cost += _micro(market.price_usd_per_hour, hit)
        seen.append(now)
        if len(seen) >= MAX_INTERRUPTIONS_PER_RUN:
            break
        if chooser is not None:
            key = by_model.get(id(market))
            if key is not None:
                cooled[key] = now + COOLDOWN_S
            market = chooser.pick(now, cooled, seen) or market
        overhead = market.boot_s + market.restart_s
        now += overhead
        cost += _micro(market.price_usd_per_hour, overhead)
    return RunOutcome(round(cost), now, len(seen))


@dataclass(frozen=True)
class Distribution:
    mean: float
    p10: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        ordered = sorted(values)
        n = len(ordered)
        if n == 0:
            return cls(math.nan, math.nan, math.nan)

        def q(p: float) -> float:
            pos = p * (n - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, n - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

        return cls(sum(ordered) / n, q(0.1), q(0.9))

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p10": self.p10, "p90": self.p90}


@dataclass(frozen=True)
class Option:
    """One way to run the job, simulated: cost (micro-dollars) and finish time (s) distributions."""

    name: str
    description: str
    cost_microusd: Distribution
    finish_s: Distribution
    interruptions_mean: float
    markets: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "cost_microusd": self.cost_microusd.to_dict(),
            "cost_usd": {k: usd(round(v)) for k, v in self.cost_microusd.to_dict().items()},
            "finish_s": self.finish_s.to_dict(),
            "interruptions_mean": self.interruptions_mean,
            "markets": list(self.markets),
        }


@dataclass(frozen=True)
class Advice:
    options: tuple[Option, ...]
    recommended: str
    reason: str
    work_h: float
    nodes: int
    runs: int
    notes: tuple[str, ...] = field(default_factory=tuple)

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommended": self.recommended,
            "reason": self.reason,
            "work_h": self.work_h,
            "nodes": self.nodes,
            "runs": self.runs,
            "options": [o.to_dict() for o in self.options],
            "notes": list(self.notes),
        }


def simulate_option(
    name: str,
    description: str,
    node_plans: Sequence[tuple[MarketModel, _Chooser | None]],
    work_s: float,
    runs: int,
    rng: random.Random,
) -> Option:
    """``runs`` runs of every node of a plan; a run's cost is the nodes' sum, its finish their max."""
    costs: list[float] = []
    finishes: list[float] = []
    interruptions = 0
    for _ in range(runs):
        outcomes = [simulate_run(m, work_s, rng, chooser) for m, chooser in node_plans]
        costs.append(float(sum(o.cost_microusd for o in outcomes)))
        finishes.append(max(o.finish_s for o in outcomes))
        interruptions += sum(o.interruptions for o in outcomes)
    return Option(
        name,
        description,
        Distribution.of(costs),
        Distribution.of(finishes),
        interruptions / runs,
        tuple(dict.fromkeys(m.label for m, _ in node_plans)),
    )


def advise(
    candidates: Sequence[Candidate],
    *,
    work_h: float,
    nodes: int = 1,
    deadline_s: float | None = None,
    runs: int = DEFAULT_RUNS,
    seed: int = DEFAULT_SEED,
    reserved_usd_per_hour: float | None = None,
    reserved_count: int | None = None,
) -> Advice:
    """The options for a job of ``nodes`` nodes with ``work_h`` useful hours each (module contract)."""
    if not (work_h > 0 and math.isfinite(work_h)):
        raise ConfigError(f"--work-h must be positive hours of useful work per node, got {work_h}")
    HOURS.check(work_h, "--work-h")  # simulated hour by hour: a year at most, as a job's work
    if reserved_usd_per_hour is not None:
        PRICE_USD_PER_HOUR.check(reserved_usd_per_hour, "--reserved-price")
    if runs < 1:
        raise ConfigError(f"--runs must be at least 1, got {runs}")
    spot = [c for c in candidates if c.market_kind is MarketKind.SPOT]
    on_demand = [c for c in candidates if c.market_kind is MarketKind.ON_DEMAND]
    reserved = [c for c in candidates if c.market_kind is MarketKind.RESERVED]
    models = {id(c): MarketModel.of(c) for c in (*spot, *on_demand)}
    work_s = work_h * SECONDS_PER_HOUR
    rng = random.Random(seed)
    options: list[Option] = []
    notes: list[str] = []
    if on_demand:
        od = models[id(on_demand[0])]
        options.append(
            simulate_option(
                "on-demand", f"on-demand on {od.label}", [(od, None)] * nodes, work_s, runs, rng
            )
        )
    else:
        notes.append("no on-demand market offers this job's hardware: no on-demand option")
    for tolerance in ("aggressive", "balanced", "conservative"):
        chooser = _Chooser(spot, on_demand, tolerance, models)
        first = chooser.pick(0.0, {}, [])
        if first is None or (first.kind != "spot" and tolerance == "aggressive"):
            notes.append(f"spot/{tolerance}: no usable spot market")
            continue
        options.append(
            simulate_option(
                f"spot/{tolerance}",
                f"spot, tolerance {tolerance}, first on {first.label}",
                [(first, chooser)] * nodes,
                work_s,
                runs,
                rng,
            )
        )
    if reserved or reserved_usd_per_hour is not None:
        options.extend(
            _reserved_option(
                reserved,
                spot,
                on_demand,
                models,
                nodes,
                work_s,
                runs,
                rng,
                reserved_usd_per_hour,
                reserved_count,
                notes,
            )
        )
    if not options:
        raise ConfigError(
            "no spot, on-demand or reserved market can run this job: nothing to advise"
        )
    recommended, reason = _recommend(options, deadline_s)
    return Advice(tuple(options), recommended, reason, work_h, nodes, runs, tuple(notes))


def _reserved_option(
    reserved: Sequence[Candidate],
    spot: Sequence[Candidate],
    on_demand: Sequence[Candidate],
    models: dict[int, MarketModel],
    nodes: int,
    work_s: float,
    runs: int,
    rng: random.Random,
    rate: float | None,
    count: int | None,
    notes: list[str],
) -> list[Option]:
    if reserved:
        base = MarketModel.of(reserved[0], rate)
    elif on_demand:
        # No pool listed: a reserved commitment on the best on-demand type, at the given rate.
        od = on_demand[0]
        base = MarketModel.of(od, rate)
        base = MarketModel(f"{od.market_id.slug} (reserved)", "reserved", *_tail(base))
    else:
        notes.append("reserved + spot: no market to reserve on")
        return []
    held = min(nodes, count if count is not None else (1 if nodes > 1 else nodes))
    chooser = _Chooser(spot, on_demand, "balanced", models)
    first = chooser.pick(0.0, {}, [])
    plans: list[tuple[MarketModel, _Chooser | None]] = [(base, None)] * held
    if nodes > held:
        if first is None:
            notes.append("reserved + spot: no spot or on-demand market for the other nodes")
            return []
        plans += [(first, chooser)] * (nodes - held)
    return [
        simulate_option(
            "reserved+spot",
            f"{held} node(s) reserved on {base.label}, {nodes - held} on spot (balanced)",
            plans,
            work_s,
            runs,
            rng,
        )
    ]


def _tail(m: MarketModel) -> tuple[float, float, float, float, float, float]:
    return (
        m.price_usd_per_hour,
        0.0,
        m.interval_s,
        m.save_s,
        m.restart_s,
        m.boot_s,
    )


def _recommend(options: Sequence[Option], deadline_s: float | None) -> tuple[str, str]:
    meeting = [o for o in options if deadline_s is None or o.finish_s.p90 <= deadline_s] or list(
        options
    )
    best = min(meeting, key=lambda o: (o.cost_microusd.mean, o.finish_s.mean))
    why = f"lowest expected cost, {_usd(best.cost_microusd.mean)}"
    if deadline_s is not None:
        if len(meeting) < len(options) or best.finish_s.p90 <= deadline_s:
            why += (
                f", p90 finish {_hours(best.finish_s.p90)} within the deadline {_hours(deadline_s)}"
            )
        else:
            why += f"; no option's p90 finish meets the deadline {_hours(deadline_s)}"
    od = next((o for o in options if o.name == "on-demand"), None)
    spots = [o for o in options if o.name.startswith("spot/")]
    if best.name == "on-demand":
        if spots:
            cheapest = min(spots, key=lambda o: o.cost_microusd.mean)
            why = (
                f"use on-demand: spot loses here — its best ({cheapest.name}) expects "
                f"{_usd(cheapest.cost_microusd.mean)} with {cheapest.interruptions_mean:.1f} "
                f"interruptions per run against on-demand's {_usd(best.cost_microusd.mean)} "
                "(saves and restarts cost more than the discount)"
            )
        else:
            why = "use on-demand: no usable spot market for this job"
    elif od is not None and od.cost_microusd.mean > 0:
        saving = 1 - best.cost_microusd.mean / od.cost_microusd.mean
        why += f", {saving:.0%} below on-demand's {_usd(od.cost_microusd.mean)}"
        why += f"; {best.interruptions_mean:.1f} interruptions expected per run"
    return best.name, why


def _usd(microusd: float) -> str:
    return f"${microusd / 1e6:,.2f}"


def _hours(seconds: float) -> str:
    return f"{seconds / SECONDS_PER_HOUR:.2f} h"
