"""What a deadline policy sees and answers, the safety rule, and the registry.

A deadline policy answers one question before every decision interval (a
*tick*): run the job on SPOT (and in which zone), on ON_DEMAND, or NONE (idle)?
It sees a small :class:`DeadlineState` — how much work is left, how long until
the deadline, what ran last, and per zone whether spot is there *now*, its
price now and the market layer's estimates (preemption rate, availability,
mean outage) — and nothing of the future. The simulator
(:mod:`spothop.scheduler.simulate`) builds that state from a trace tick by tick;
the controller's ``decide`` can build it from a job and its snapshot, so the
same classes decide in both.

Contract of :meth:`Policy.decide`: deterministic for the same state (a policy
may cache work keyed on its inputs, never on call order); returns a
:class:`Decision` whose ``zone`` indexes ``state.zones`` when ``kind`` is SPOT.
Asking for SPOT where spot is not available *now* yields NONE (the simulator
enforces it). Every online policy is wrapped in :func:`apply_safety_rule`
(``SIMULATION.md``): once the work left plus one restart no longer fits before
the deadline, the decision is ON_DEMAND, unless SPOT is running with no pending
overhead, which is kept.

Policies are small classes registered by name (:func:`register`), looked up with
:func:`get_policy`; ``spothop simulate --policy NAME`` and a job's deadline
policy use the same names.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, TypeVar

from spothop.errors import ConfigError

EPS_S = 1e-6  # below a microsecond of work or overhead is float dust, not work


class Kind(IntEnum):
    """What runs in a tick. Integers so that the simulator's hot loop compares cheaply."""

    NONE = 0
    ON_DEMAND = 1
    SPOT = 2

    @property
    def label(self) -> str:
        return {Kind.NONE: "none", Kind.ON_DEMAND: "on-demand", Kind.SPOT: "spot"}[self]


@dataclass(frozen=True, slots=True)
class Decision:
    """Run ``kind`` next tick; for SPOT, in ``state.zones[zone]``. ``zone`` is 0 otherwise.

    ``make_before_break``: move from the spot instance running in another zone
    without losing a tick — the new one boots (billed) while the old one keeps
    working, and the job switches once it is up (only where the restart fits in
    one tick; elsewhere the move is a plain restart). Not part of equality: what
    runs is the same either way. A policy that weighs a move records what it
    expected: ``overlap_cost_usd`` (the new instance billed while both run) and
    ``expected_saving_usd`` (0 where nothing was weighed).
    """

    kind: Kind
    zone: int = 0
    make_before_break: bool = field(default=False, compare=False)
    overlap_cost_usd: float = field(default=0.0, compare=False)
    expected_saving_usd: float = field(default=0.0, compare=False)


IDLE = Decision(Kind.NONE)
ON_DEMAND = Decision(Kind.ON_DEMAND)


@dataclass(frozen=True, slots=True)
class ZoneView:
    """One zone's spot market as an online controller knows it at the start of a tick.

    ``available``: spot can be had in the tick being decided. ``price_usd_per_hour``:
    the spot price now. The estimates come from the history up to now (the
    market layer's reliability book, or the trace so far in a simulation); None
    where there is no evidence yet. ``down_for_s``/``up_for_s``: how long spot
    has been continuously unavailable/available up to now. ``preemption_odds_per_tick``
    and ``recovery_odds_by_age`` (for outages 1, 2, … ticks old, the last for every
    older one) are the same evidence per decision interval, for policies that plan.
    """

    available: bool
    price_usd_per_hour: float
    availability: float | None = None
    preemption_rate_per_h: float | None = None
    mean_outage_s: float | None = None
    down_for_s: float = 0.0
    up_for_s: float = 0.0
    preemption_odds_per_tick: float | None = None
    recovery_odds_by_age: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class DeadlineState:
    """A job's progress at the start of a tick: everything a deadline policy may use.

    Times are seconds since the job started; ``deadline_s`` too. ``last`` is what
    ran in the previous tick (SPOT even if spot vanished since: then
    ``zones[last.zone].available`` is False and the instance is gone).
    ``pending_overhead_s`` is restart overhead still to pay on ``last``.
    ``any_zone``, with several zones, is the evidence for "spot somewhere among
    them" (available when any zone is), where the controller has it.
    """

    elapsed_s: float
    work_left_s: float
    task_s: float
    deadline_s: float
    restart_overhead_s: float
    tick_s: float
    last: Decision
    pending_overhead_s: float
    zones: tuple[ZoneView, ...]
    on_demand_price_usd_per_hour: float
    any_zone: ZoneView | None = None

    @property
    def spot_running(self) -> bool:
        """SPOT ran last and its instance is still there."""
        return self.last.kind is Kind.SPOT and self.zones[self.last.zone].available

    def ticks_left(self) -> int:
        """Whole ticks before the deadline (``left`` / ``R``/gap in SIMULATION.md)."""
        return math.floor((self.deadline_s - self.elapsed_s) / self.tick_s + EPS_S)

    def ticks_needed(self, restarts: int = 1) -> int:
        """Ticks to finish with ``restarts`` restart overheads (``need1``, ``need2``)."""
        work = self.work_left_s + restarts * self.restart_overhead_s
        return math.ceil(work / self.tick_s - EPS_S)

    def best_available_zone(self) -> int | None:
        """The zone to run spot in now: the running one if still there, else the cheapest available."""
        if self.spot_running:
            return self.last.zone
        open_zones = [i for i, z in enumerate(self.zones) if z.available]
        if not open_zones:
            return None
        return min(open_zones, key=lambda i: (self.zones[i].price_usd_per_hour, i))


def apply_safety_rule(state: DeadlineState, decision: Decision) -> Decision:
    """SIMULATION.md's safety rule: with need = ⌈(W+d)/gap⌉ ≥ left = ⌊(D−t)/gap⌋, go ON_DEMAND,
    except that SPOT running with no pending overhead is kept (NONE if spot just vanished)."""
    if state.ticks_needed(1) < state.ticks_left():
        return decision
    if state.last.kind is Kind.SPOT and state.pending_overhead_s <= EPS_S:
        return Decision(Kind.SPOT, state.last.zone)
    return ON_DEMAND


def advise(policy: Policy, state: DeadlineState) -> Decision:
    """The one call a controller makes: the policy's decision, through the safety rule for online
    policies, with SPOT where spot is gone now turned into NONE (the simulator does the same)."""
    decision = policy.decide(state)
    if policy.online:
        decision = apply_safety_rule(state, decision)
    if decision.kind is Kind.SPOT and not (
        0 <= decision.zone < len(state.zones) and state.zones[decision.zone].available
    ):
        return IDLE
    return decision


class Policy(ABC):
    """A registered deadline policy. Subclasses set ``name`` and explain *why* in the docstring.

    ``online`` policies are wrapped in the safety rule by the simulator; the
    offline oracle is not (it sees the whole trace and needs no rule of thumb).
    """

    name: ClassVar[str]
    online: ClassVar[bool] = True

    @abstractmethod
    def decide(self, state: DeadlineState) -> Decision:
        """The decision for the tick starting at ``state.elapsed_s`` (see the module contract)."""


_REGISTRY: dict[str, type[Policy]] = {}
P = TypeVar("P", bound=type[Policy])


def register(cls: P) -> P:
    """Class decorator: make ``cls`` known by its ``name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two deadline policies are named {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    """Every registered policy's name, sorted."""
    return sorted(_REGISTRY)


def policy_class(name: str) -> type[Policy]:
    """The class registered as ``name``; a :class:`ConfigError` listing the known names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"--policy {name!r} is not a deadline policy; choose one of {', '.join(policy_names())}"
        ) from None


def get_policy(name: str, **options: object) -> Policy:
    """A fresh instance of the policy registered as ``name``."""
    return policy_class(name)(**options)


PolicyFactory = Callable[[], Policy]


def zone_prices(zones: Sequence[ZoneView]) -> list[float]:
    """Each zone's spot price now (a helper for policies that weigh zones)."""
    return [z.price_usd_per_hour for z in zones]
