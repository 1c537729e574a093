"""Recovery per tolerance: which markets a job's (re)launch may use, and what a notice-blind instance gets.

A job's ``tolerance`` names one of the small registered policies below. The
controller's ``decide`` ranks the usable spot and on-demand candidates (best
first, cooled and failed markets already left out) and asks the policy:

- :meth:`TolerancePolicy.choose` — the candidates to try, in order, and why;
- :meth:`TolerancePolicy.notice_blind` — what to do with a running spot
  instance whose agent said it may miss an interruption notice.

Policies are pure functions of what they are given (no clock: ``now`` is the
snapshot's), so ``spothop simulate`` drives the very same code. Reserved
capacity is not theirs to decide: pools the user owns are filled first, by
``decide``, whatever the tolerance. A job whose ``market`` is ``on-demand``
never asks its policy; ``auto`` asks it like ``spot`` but ranks the kinds on
score alone (:attr:`Situation.prefer_spot` is ``False``).

Register a new policy with :func:`register`; :func:`policy_for` finds one by
name, and an unknown name is a :class:`~spothop.errors.ConfigError` naming
the known ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from spothop.errors import ConfigError
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate

# balanced: this many interruptions within the window and the job moves to on-demand. Three
# in an hour means the job spends more time restarting than a spot discount gives back
# (a restart costs boot + restore + the work since the last checkpoint, minutes each).
BALANCED_MAX_INTERRUPTIONS = 3
BALANCED_WINDOW_S = 3600.0
# balanced: spot must save at least this share of the cost of useful work against the best
# on-demand candidate. The score already prices expected preemptions (goodput); the margin
# pays for what it does not model (a notice missed, a long restore, a storm's clustering).
BALANCED_MIN_SPOT_SAVING = 0.20
# conservative: only spot markets calmer than this (one expected preemption per 20 hours:
# the calm end of what spot markets report, AWS's "<5 %" frequency band over a day).
CONSERVATIVE_MAX_RATE_PER_H = 0.05


class NoticeBlindResponse(StrEnum):
    """What a running spot instance that may miss its notice gets."""

    KEEP = "keep"  # leave it: the job's periodic checkpoints bound what a surprise costs
    REPLACE = (
        "replace"  # start a spot replacement on another type, then stop it (make-before-break)
    )
    ON_DEMAND = "on-demand"  # start an on-demand replacement, then stop it


@dataclass(frozen=True)
class Situation:
    """What a policy may know about the job it places (times in unix seconds, the snapshot's clock)."""

    now: float
    interruption_times: tuple[float, ...] = ()  # oldest first
    prefer_spot: bool = (
        True  # market: spot (True) or auto (False: spot and on-demand on score alone)
    )

    @property
    def interruptions(self) -> int:
        return len(self.interruption_times)

    def interruptions_within(self, window_s: float) -> int:
        return sum(1 for t in self.interruption_times if self.now - t <= window_s)


@dataclass(frozen=True)
class Choice:
    """The candidates to try, best first (may be empty: nothing fits now), and why."""

    candidates: tuple[Candidate, ...]
    reason: str


class TolerancePolicy(ABC):
    """One recovery policy: its ``name`` is the spec's ``tolerance`` value."""

    name: ClassVar[str] = ""

    @abstractmethod
    def choose(
        self, spot: Sequence[Candidate], on_demand: Sequence[Candidate], situation: Situation
    ) -> Choice:
        """The candidates to launch from, given the usable ``spot`` and ``on_demand`` ones (best first)."""

    @abstractmethod
    def notice_blind(self, situation: Situation) -> NoticeBlindResponse:
        """What a running spot instance whose agent is notice-blind gets."""


def _by_score(spot: Sequence[Candidate], on_demand: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Both kinds merged on score (stable: spot first on a tie, each list's own order kept);
    under ordered alternatives, an earlier alternative's candidates first (``preference``)."""
    merged = [(c.preference, c.score, 0, i, c) for i, c in enumerate(spot)]
    merged += [(c.preference, c.score, 1, i, c) for i, c in enumerate(on_demand)]
    return tuple(item[4] for item in sorted(merged, key=lambda item: item[:4]))


_REGISTRY: dict[str, TolerancePolicy] = {}


def register(cls: type[TolerancePolicy]) -> type[TolerancePolicy]:
    """Class decorator: make ``cls`` the policy of its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a name")
    _REGISTRY[cls.name] = cls()
    return cls


def policy_for(name: str) -> TolerancePolicy:
    """The registered policy called ``name``; a :class:`ConfigError` naming the known ones otherwise."""
    try:
        return _REGISTRY[str(name)]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ConfigError(f"tolerance: unknown policy {name!r}; expected one of {known}") from None


def policies() -> dict[str, TolerancePolicy]:
    return dict(_REGISTRY)


@register
class Aggressive(TolerancePolicy):
    """Spot anywhere, on-demand never: the cheapest useful work, whatever the interruptions.

    Why: a job that checkpoints often loses minutes to a preemption, and spot
    is 60–90 % off; so every relaunch goes back to spot, to the best-scoring
    market that is not cooling down (the one that just preempted is cooled,
    so the next try lands elsewhere). When no spot market has capacity the job
    waits rather than pay on-demand. A notice-blind instance is kept: the
    periodic checkpoint bounds what a surprise preemption costs.

    Example (spot in zones a, b, c; a preempts twice)::

        launch spot/a  → preempted → a cooled 30 min → launch spot/b
        spot/b preempted           → b cooled        → launch spot/c
        no spot capacity anywhere  → wait (never on-demand)
    """

    name: ClassVar[str] = "aggressive"

    def choose(
        self, spot: Sequence[Candidate], on_demand: Sequence[Candidate], situation: Situation
    ) -> Choice:
        del on_demand, situation
        if not spot:
            return Choice((), "aggressive: no usable spot market now (on-demand is never used)")
        return Choice(tuple(spot), "aggressive: spot, best score first")

    def notice_blind(self, situation: Situation) -> NoticeBlindResponse:
        return NoticeBlindResponse.KEEP


@register
class Balanced(TolerancePolicy):
    """Spot while it pays; on-demand after repeated interruptions or when spot saves too little.

    Why: preemptions cluster (a market that took one instance often takes the
    next), and past a few restarts in an hour the job spends more on boots,
    restores and recomputed work than spot saves. So: spot, unless
    :data:`BALANCED_MAX_INTERRUPTIONS` interruptions came within
    :data:`BALANCED_WINDOW_S`, or the best spot candidate does not beat the
    best on-demand one by :data:`BALANCED_MIN_SPOT_SAVING` of the cost of
    useful work (the margin pays for what the goodput model leaves out). The
    other kind follows as the fallback when the first has no usable market. A
    notice-blind spot instance is replaced on spot (another type: the blind
    one is kept off spot), make-before-break.

    Example (λ rising in every zone)::

        launch spot/a (score 1.0 vs on-demand 2.0)       → preempted at 10:00
        relaunch spot/b                                   → preempted at 10:20
        relaunch spot/c                                   → preempted at 10:35
        3 interruptions within 1 h                        → relaunch on-demand
        (at 11:40 the window has emptied: the next relaunch is spot again)
    """

    name: ClassVar[str] = "balanced"

    def choose(
        self, spot: Sequence[Candidate], on_demand: Sequence[Candidate], situation: Situation
    ) -> Choice:
        recent = situation.interruptions_within(BALANCED_WINDOW_S)
        if recent >= BALANCED_MAX_INTERRUPTIONS and on_demand:
            return Choice(
                tuple(on_demand) + tuple(spot),
                f"balanced: {recent} interruptions within {BALANCED_WINDOW_S:.0f} s: on-demand",
            )
        if not situation.prefer_spot:
            return Choice(_by_score(spot, on_demand), "balanced (market auto): best score first")
        if spot and on_demand:
            limit = on_demand[0].score * (1.0 - BALANCED_MIN_SPOT_SAVING)
            if spot[0].score > limit:
                return Choice(
                    tuple(on_demand) + tuple(spot),
                    f"balanced: best spot score {spot[0].score:.4g} does not save "
                    f"{BALANCED_MIN_SPOT_SAVING:.0%} on on-demand's {on_demand[0].score:.4g}: on-demand",
                )
        if spot:
            return Choice(tuple(spot) + tuple(on_demand), "balanced: spot, best score first")
        if on_demand:
            return Choice(tuple(on_demand), "balanced: no usable spot market: on-demand")
        return Choice((), "balanced: no usable spot or on-demand market now")

    def notice_blind(self, situation: Situation) -> NoticeBlindResponse:
        return NoticeBlindResponse.REPLACE


def low_risk(candidate: Candidate) -> bool:
    """A spot market calm enough for a conservative job (λ at most :data:`CONSERVATIVE_MAX_RATE_PER_H`)."""
    return (
        candidate.market_kind is not MarketKind.SPOT
        or candidate.preemption_rate_per_h <= CONSERVATIVE_MAX_RATE_PER_H
    )


@register
class Conservative(TolerancePolicy):
    """Only low-risk spot markets; on-demand when those are gone; never a notice-blind spot instance.

    Why: some jobs cannot afford a restart (long restores, tight deadlines)
    but still want spot's discount where a preemption is unlikely. So only
    spot markets whose preemption rate is at most
    :data:`CONSERVATIVE_MAX_RATE_PER_H` (one expected per 20 h) are used, and
    when none is usable the job goes to on-demand. A notice-blind spot
    instance could be taken without warning, the one risk this tolerance does
    not take: it is replaced on on-demand, make-before-break.

    Example (spot λ: zone a 0.02/h, zone b 0.3/h)::

        launch spot/a (λ 0.02)  → preempted → a cooled
        zone b is stormy (λ 0.3) → not used  → relaunch on-demand
    """

    name: ClassVar[str] = "conservative"

    def choose(
        self, spot: Sequence[Candidate], on_demand: Sequence[Candidate], situation: Situation
    ) -> Choice:
        calm = tuple(c for c in spot if low_risk(c))
        if calm and situation.prefer_spot:
            return Choice(calm + tuple(on_demand), "conservative: low-risk spot")
        if calm:
            return Choice(
                _by_score(calm, on_demand), "conservative (market auto): best score first"
            )
        if on_demand:
            return Choice(
                tuple(on_demand),
                f"conservative: no spot market with λ ≤ {CONSERVATIVE_MAX_RATE_PER_H}/h: on-demand",
            )
        return Choice((), "conservative: no low-risk spot or on-demand market now")

    def notice_blind(self, situation: Situation) -> NoticeBlindResponse:
        return NoticeBlindResponse.ON_DEMAND
