"""Reliability of a spot market: preemption rate λ, availability, and one score in [0, 1].

Evidence per market (:class:`MarketEvidence`, over a sliding window, 7 days by
default) comes from traces (:func:`evidence_from_trace`) or from spothop's own
interruption records (:mod:`spothop.market.interruptions`):

- ``n`` preemptions over ``T`` instance-hours (a trace's count falling by k is
  k preemptions; ``T = Σ count·tick``);
- up time, down time and recoveries (capacity ≥ 1 or not): availability
  ``A_obs = up / (up + down)`` and mean time to regain capacity ``down / recoveries``;
- mean instance lifetime ``up / drops`` — the exponential MLE with the last,
  unfinished run counted as censored.

**Preemption rate, shrunk (Gamma–Poisson, empirical Bayes).** One market's
``n / T`` is noise when ``T`` is small, so λ has a Gamma(α, β) prior whose mean
``λ₀ = α/β`` is the pooled rate ``Σn / ΣT`` of the market's group — same
provider and GPU; if that group holds fewer than two markets, the provider;
then all markets; then :data:`DEFAULT_PRIOR_RATE_PER_H`. The prior's weight β
(in instance-hours) comes from the spread between the group's markets by the
method of moments::

    var_between = max(0, (Σ Tᵢ (rᵢ − λ₀)² − (k − 1) λ₀) / (ΣT − ΣTᵢ² / ΣT))
    β = clamp(λ₀ / var_between, MIN_PRIOR_H, MAX_PRIOR_H)     α = λ₀ β
    λ = (α + n) / (β + T)                                      (posterior mean, per hour)

so markets that differ a lot are trusted on their own data sooner. An AWS
Spot Instance Advisor bucket, when given, replaces λ₀ with the bucket's rate
(:data:`ADVISOR_BUCKET_RATE_PER_H`). Mean time between preemptions is ``1/λ``.

**Availability, shrunk (Beta-like).** ``A = (A₀·S + up_h) / (S + observed_h)``
with ``S`` = :data:`AVAILABILITY_PRIOR_H` and ``A₀`` the group's pooled
availability, or an AWS spot placement score / 10 when given.

**Score.** ``score = A · exp(−λ · H)`` with ``H`` = :data:`REFERENCE_RUN_H`:
the probability that capacity is there at a random moment *and* an instance
started then runs ``H`` hours unpreempted (Poisson preemptions). Risk is
``1 − score``. Both terms are monotone: more preemptions or less availability
never raise the score.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from spothop.market.availability import AvailabilityTrace
from spothop.resources.market_id import MarketId

SECONDS_PER_HOUR = 3600.0
WINDOW_S = 7 * 86400.0  # issue 5: preemptions per instance-hour over a sliding 7-day window
REFERENCE_RUN_H = 1.0  # the score's horizon: one hour, a typical durable-checkpoint interval
MIN_PRIOR_H = 12.0  # the prior never counts for less than half a day of one instance…
MAX_PRIOR_H = 168.0  # …nor more than one instance-week: a week of data always moves it
DEFAULT_PRIOR_H = 24.0  # prior weight when a group's spread cannot be estimated (one market)
# With no data anywhere: one preemption per ~20 instance-hours, about the median
# of the Can't Be Late AWS GPU traces (0.04–1.2 per up-hour, NSDI'24).
DEFAULT_PRIOR_RATE_PER_H = 0.05
DEFAULT_PRIOR_AVAILABILITY = 0.5  # uninformative: as likely there as not
AVAILABILITY_PRIOR_H = 24.0  # a day of observation outweighs the availability prior
PLACEMENT_SCORE_MAX = 10  # AWS GetSpotPlacementScores returns 1..10
_HOURS_PER_MONTH = 30 * 24.0


class AdvisorBucket(StrEnum):
    """AWS Spot Instance Advisor "frequency of interruption" (share of instances, trailing month)."""

    UNDER_5 = "<5%"
    FROM_5_TO_10 = "5-10%"
    FROM_10_TO_15 = "10-15%"
    FROM_15_TO_20 = "15-20%"
    OVER_20 = ">20%"


def _monthly_share_to_rate(share: float) -> float:
    """A share of instances interrupted per month → a Poisson rate per instance-hour."""
    return -math.log(1.0 - share) / _HOURS_PER_MONTH


# Each bucket's midpoint (>20 %: 25 %), as a rate per instance-hour.
ADVISOR_BUCKET_RATE_PER_H: Mapping[AdvisorBucket, float] = {
    AdvisorBucket.UNDER_5: _monthly_share_to_rate(0.025),
    AdvisorBucket.FROM_5_TO_10: _monthly_share_to_rate(0.075),
    AdvisorBucket.FROM_10_TO_15: _monthly_share_to_rate(0.125),
    AdvisorBucket.FROM_15_TO_20: _monthly_share_to_rate(0.175),
    AdvisorBucket.OVER_20: _monthly_share_to_rate(0.25),
}


@dataclass(frozen=True)
class ProviderSignals:
    """Optional signals a cloud publishes about a market (AWS today)."""

    placement_score: int | None = None  # AWS spot placement score, 1..10
    advisor_bucket: AdvisorBucket | None = None

    def __post_init__(self) -> None:
        if (
            self.placement_score is not None
            and not 1 <= self.placement_score <= PLACEMENT_SCORE_MAX
        ):
            raise ValueError(
                f"placement score must be 1..{PLACEMENT_SCORE_MAX}, got {self.placement_score}"
            )


@dataclass(frozen=True)
class MarketEvidence:
    """What was observed of one market in one window (see the module docstring).

    ``up_s + down_s == 0`` means availability was not observed (interruption
    records alone say nothing about capacity that was never asked for).
    """

    market: MarketId
    gpu: str
    instance_hours: float
    preemptions: int
    up_s: float = 0.0
    down_s: float = 0.0
    recoveries: int = 0
    lifetime_s_total: float = 0.0
    lifetimes_ended: int = 0
    source: str = ""

    def __add__(self, other: MarketEvidence) -> MarketEvidence:
        return replace(
            self,
            instance_hours=self.instance_hours + other.instance_hours,
            preemptions=self.preemptions + other.preemptions,
            up_s=self.up_s + other.up_s,
            down_s=self.down_s + other.down_s,
            recoveries=self.recoveries + other.recoveries,
            lifetime_s_total=self.lifetime_s_total + other.lifetime_s_total,
            lifetimes_ended=self.lifetimes_ended + other.lifetimes_ended,
            source="; ".join(s for s in (self.source, other.source) if s),
        )

    @property
    def raw_rate_per_h(self) -> float | None:
        return self.preemptions / self.instance_hours if self.instance_hours > 0 else None

    @property
    def raw_availability(self) -> float | None:
        observed = self.up_s + self.down_s
        return self.up_s / observed if observed > 0 else None


def evidence_from_trace(
    trace: AvailabilityTrace,
    market: MarketId,
    gpu: str,
    window_s: float | None = WINDOW_S,
    end_tick: int | None = None,
) -> MarketEvidence:
    """Evidence from the ``window_s`` seconds of ``trace`` ending at ``end_tick`` (default: its end).

    ``window_s=None`` uses everything before ``end_tick``.
    """
    end = len(trace) if end_tick is None else end_tick
    ticks = end if window_s is None else min(end, max(1, math.ceil(window_s / trace.tick_s)))
    counts = trace.counts[end - ticks : end]
    ok = counts >= 1
    drops = int(np.count_nonzero(ok[:-1] & ~ok[1:]))
    up_s = float(np.count_nonzero(ok)) * trace.tick_s
    return MarketEvidence(
        market=market,
        gpu=gpu,
        instance_hours=float(counts.sum()) * trace.tick_s / SECONDS_PER_HOUR,
        preemptions=int(np.clip(counts[:-1] - counts[1:], 0, None).sum()),
        up_s=up_s,
        down_s=float(counts.size) * trace.tick_s - up_s,
        recoveries=int(np.count_nonzero(~ok[:-1] & ok[1:])),
        lifetime_s_total=up_s,
        lifetimes_ended=drops,
        source=trace.source or trace.name,
    )


@dataclass(frozen=True)
class Prior:
    """A Gamma(α = rate·strength, β = strength) prior on λ and an availability prior."""

    rate_per_h: float
    strength_h: float
    availability: float
    source: str


DEFAULT_PRIOR = Prior(
    DEFAULT_PRIOR_RATE_PER_H, DEFAULT_PRIOR_H, DEFAULT_PRIOR_AVAILABILITY, "default"
)


def pooled_prior(evidence: Sequence[MarketEvidence], source: str) -> Prior | None:
    """The empirical-Bayes prior of a group of markets; None if it has no exposure."""
    exposed = [e for e in evidence if e.instance_hours > 0]
    total_t = sum(e.instance_hours for e in exposed)
    if total_t <= 0:
        return None
    rate = sum(e.preemptions for e in exposed) / total_t
    strength = DEFAULT_PRIOR_H
    if len(exposed) >= 2 and rate > 0:
        spread = sum(
            e.instance_hours * (e.preemptions / e.instance_hours - rate) ** 2 for e in exposed
        )
        effective_t = total_t - sum(e.instance_hours**2 for e in exposed) / total_t
        var_between = (
            max(0.0, (spread - (len(exposed) - 1) * rate) / effective_t) if effective_t > 0 else 0.0
        )
        strength = MAX_PRIOR_H if var_between == 0 else rate / var_between
    observed = sum(e.up_s + e.down_s for e in evidence)
    availability = (
        sum(e.up_s for e in evidence) / observed if observed > 0 else DEFAULT_PRIOR_AVAILABILITY
    )
    return Prior(rate, min(MAX_PRIOR_H, max(MIN_PRIOR_H, strength)), availability, source)


@dataclass(frozen=True)
class Reliability:
    """One market's reliability. Rates are per instance-hour; times in seconds.

    ``mean_lifetime_s`` and ``mean_time_to_regain_s`` are None where no
    instance ended (or no capacity came back) in the window.
    """

    market: MarketId
    gpu: str
    preemption_rate_per_h: float
    raw_rate_per_h: float | None
    availability: float
    raw_availability: float | None
    score: float
    instance_hours: float
    preemptions: int
    mean_lifetime_s: float | None
    mean_time_to_regain_s: float | None
    prior: Prior

    @property
    def mean_time_between_preemptions_s(self) -> float:
        return (
            SECONDS_PER_HOUR / self.preemption_rate_per_h
            if self.preemption_rate_per_h > 0
            else math.inf
        )

    @property
    def risk(self) -> float:
        return 1.0 - self.score

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; an infinite mean time between preemptions (λ = 0) is ``None``."""
        mtbp = self.mean_time_between_preemptions_s
        return {
            **self.market.to_dict(),
            "gpu": self.gpu,
            "preemption_rate_per_h": self.preemption_rate_per_h,
            "raw_rate_per_h": self.raw_rate_per_h,
            "mean_time_between_preemptions_s": None if math.isinf(mtbp) else mtbp,
            "availability": self.availability,
            "raw_availability": self.raw_availability,
            "score": self.score,
            "preemptions": self.preemptions,
            "instance_hours": self.instance_hours,
            "mean_lifetime_s": self.mean_lifetime_s,
            "mean_time_to_regain_s": self.mean_time_to_regain_s,
            "prior": {
                "source": self.prior.source,
                "rate_per_h": self.prior.rate_per_h,
                "strength_h": self.prior.strength_h,
                "availability": self.prior.availability,
            },
        }


def score_of(availability: float, rate_per_h: float) -> float:
    """``A · exp(−λ·H)``, H = :data:`REFERENCE_RUN_H` (see the module docstring)."""
    return float(min(1.0, max(0.0, availability * math.exp(-rate_per_h * REFERENCE_RUN_H))))


def assess(
    evidence: MarketEvidence, prior: Prior, signals: ProviderSignals | None = None
) -> Reliability:
    """One market's reliability from its evidence and its group's prior (provider signals override)."""
    if signals and signals.advisor_bucket is not None:
        prior = replace(
            prior,
            rate_per_h=ADVISOR_BUCKET_RATE_PER_H[signals.advisor_bucket],
            source=f"advisor {signals.advisor_bucket.value}",
        )
    if signals and signals.placement_score is not None:
        prior = replace(prior, availability=signals.placement_score / PLACEMENT_SCORE_MAX)
    alpha, beta = prior.rate_per_h * prior.strength_h, prior.strength_h
    rate = (alpha + evidence.preemptions) / (beta + evidence.instance_hours)
    observed_h = (evidence.up_s + evidence.down_s) / SECONDS_PER_HOUR
    availability = (
        prior.availability * AVAILABILITY_PRIOR_H + evidence.up_s / SECONDS_PER_HOUR
    ) / (AVAILABILITY_PRIOR_H + observed_h)
    return Reliability(
        market=evidence.market,
        gpu=evidence.gpu,
        preemption_rate_per_h=rate,
        raw_rate_per_h=evidence.raw_rate_per_h,
        availability=availability,
        raw_availability=evidence.raw_availability,
        score=score_of(availability, rate),
        instance_hours=evidence.instance_hours,
        preemptions=evidence.preemptions,
        mean_lifetime_s=evidence.lifetime_s_total / evidence.lifetimes_ended
        if evidence.lifetimes_ended
        else None,
        mean_time_to_regain_s=evidence.down_s / evidence.recoveries
        if evidence.recoveries
        else None,
        prior=prior,
    )


def merge_evidence(evidence: Iterable[MarketEvidence]) -> list[MarketEvidence]:
    """One evidence per market: observations of the same market are added up."""
    merged: dict[MarketId, MarketEvidence] = {}
    for item in evidence:
        merged[item.market] = merged[item.market] + item if item.market in merged else item
    return list(merged.values())


class ReliabilityBook:
    """Reliability of every market seen, and priors for markets never seen.

    Build it with :meth:`from_evidence`. ``mean_time_between_preemptions_s``
    and ``preemption_rate_per_h`` answer for *any* market: a known one from
    its shrunk estimate, an unknown one from its (provider, GPU) group's prior,
    else its provider's, else the pooled or default prior — never "no idea".
    """

    def __init__(
        self,
        markets: Mapping[MarketId, Reliability],
        priors: Mapping[tuple[str, str], Prior],
        global_prior: Prior,
    ) -> None:
        self.markets = dict(markets)
        self._priors = dict(priors)  # keys: (provider, gpu) and (provider, "")
        self.global_prior = global_prior

    @classmethod
    def from_evidence(
        cls,
        evidence: Iterable[MarketEvidence],
        signals: Mapping[MarketId, ProviderSignals] | None = None,
    ) -> ReliabilityBook:
        merged = merge_evidence(evidence)
        groups: dict[tuple[str, str], list[MarketEvidence]] = defaultdict(list)
        for item in merged:
            groups[(item.market.provider, item.gpu)].append(item)
            groups[(item.market.provider, "")].append(item)
        global_prior = pooled_prior(merged, "all markets") or DEFAULT_PRIOR
        # A group of one market would shrink it towards itself: only groups of two or more count.
        priors = {
            key: p
            for key, items in groups.items()
            if len(items) >= 2
            and (p := pooled_prior(items, f"{key[0]} {key[1] or 'all GPUs'}")) is not None
        }
        book = cls({}, priors, global_prior)
        for item in merged:
            book.markets[item.market] = assess(
                item, book.prior_for(item.market, item.gpu), (signals or {}).get(item.market)
            )
        return book

    def prior_for(self, market: MarketId, gpu: str | None) -> Prior:
        """The prior a market is shrunk towards: its (provider, GPU) group, its provider, or all."""
        if gpu and (market.provider, gpu) in self._priors:
            return self._priors[(market.provider, gpu)]
        return self._priors.get((market.provider, ""), self.global_prior)

    def get(self, market: MarketId) -> Reliability | None:
        return self.markets.get(market)

    def preemption_rate_per_h(self, market: MarketId, gpu: str | None = None) -> float:
        known = self.markets.get(market)
        return known.preemption_rate_per_h if known else self.prior_for(market, gpu).rate_per_h

    def mean_time_between_preemptions_s(self, market: MarketId, gpu: str | None = None) -> float:
        """``1/λ`` in seconds, for the checkpoint interval (e.g. Young/Daly: √(2·C·MTBP))."""
        rate = self.preemption_rate_per_h(market, gpu)
        return SECONDS_PER_HOUR / rate if rate > 0 else math.inf

    def ranked(self) -> list[Reliability]:
        """Every known market, most reliable first."""
        return sorted(self.markets.values(), key=lambda r: (-r.score, r.market))
