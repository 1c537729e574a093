"""Recommendations from a report's figures: where useful compute, interruption losses included, is cheapest.

Each market a job ran in (provider, instance type, market kind) is scored
by its **cost per useful effective-TFLOPS-hour**: what its attempts cost
over the useful work they did (:mod:`.report`'s goodput accounting, so an
interruption's recomputed work and wind-down count against the market that
caused them). Rules, in order:

1. A price is missing → say which, first: every figure below leaves it out.
2. The cheapest spot market beats the job's average by at least
   :data:`MIN_GAIN` → "raise PROVIDER's share", with both figures and the gap.
3. An on-demand (or reserved) market beats every spot market → "prefer
   on-demand here": the interruptions cost more than the discount saved.
4. Attempts whose agents reported no work (:mod:`.work`) → say how many and
   what share of the paid time: an instance billed for nothing (a boot that
   failed, a worker that never started) is a fault to look at, not a market.
5. Goodput below :data:`LOW_GOODPUT`, over the time whose agents reported
   work → the losses are large: checkpoint more often or move to calmer
   markets.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from spothop.observe.billing import SECONDS_PER_HOUR, usd
from spothop.observe.report import AttemptWork, JobReport

MIN_GAIN = 0.05  # a market 5 % cheaper per useful unit is worth shifting work to
LOW_GOODPUT = 0.8  # under this, a fifth of what was paid produced nothing kept


@dataclass(frozen=True)
class MarketScore:
    provider: str
    instance_type: str
    market: str
    cost_usd: float
    useful_effective_tflops_hours: float

    @property
    def usd_per_effective_tflops_hour(self) -> float | None:
        h = self.useful_effective_tflops_hours
        return self.cost_usd / h if h > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usd_per_effective_tflops_hour": self.usd_per_effective_tflops_hour}


@dataclass(frozen=True)
class Recommendation:
    kind: str  # missing_price | raise_share | prefer_on_demand | no_work_reported | low_goodput
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def market_scores(report: JobReport) -> list[MarketScore]:
    """Each priced market of the report with its cost per useful effective-TFLOPS-hour."""
    groups: dict[tuple[str, str, str], list[AttemptWork]] = defaultdict(list)
    for w in report.work:
        if w.record.cost_microusd is None or w.effective_tflops_per_gpu is None:
            continue
        groups[(w.record.provider, w.record.instance_type, w.record.market_kind)].append(w)
    return [
        MarketScore(
            p,
            t,
            m,
            sum(usd(w.record.cost_microusd) or 0.0 for w in ws),
            sum(
                w.useful_gpu_s / SECONDS_PER_HOUR * (w.effective_tflops_per_gpu or 0.0) for w in ws
            ),
        )
        for (p, t, m), ws in sorted(groups.items())
    ]


def recommend(report: JobReport) -> list[Recommendation]:
    """The recommendations for one job's report (module docstring: the rules)."""
    out = [
        Recommendation("missing_price", f"no price for {m}: it is left out of every figure")
        for m in report.missing_prices
    ]
    scores = [s for s in market_scores(report) if s.usd_per_effective_tflops_hour is not None]
    average = report.usd_per_effective_tflops_hour
    spot = [s for s in scores if s.market == "spot"]
    steady = [s for s in scores if s.market != "spot"]
    best_spot = min(spot, key=_score, default=None)
    if best_spot is not None and average and len(scores) > 1:
        gain = 1 - _score(best_spot) / average
        if gain >= MIN_GAIN:
            out.append(
                Recommendation(
                    "raise_share",
                    f"raise {best_spot.provider}'s share: its {best_spot.instance_type} spot cost "
                    f"{_score(best_spot):.4f} USD per useful effective-TFLOPS-hour, interruption "
                    f"losses included, {gain:.0%} below this job's {average:.4f}",
                )
            )
    best_steady = min(steady, key=_score, default=None)
    if (
        best_steady is not None
        and best_spot is not None
        and _score(best_steady) < _score(best_spot)
    ):
        out.append(
            Recommendation(
                "prefer_on_demand",
                f"{best_steady.market} {best_steady.provider} {best_steady.instance_type} did "
                f"useful work for {_score(best_steady):.4f} USD per effective-TFLOPS-hour, below "
                f"the best spot market's {_score(best_spot):.4f}: interruptions cost more than "
                "the discount saved",
            )
        )
    silent = report.unreported_attempts
    if silent and report.paid_gpu_s:
        share = report.unreported_gpu_s / report.paid_gpu_s
        out.append(
            Recommendation(
                "no_work_reported",
                f"{len(silent)} attempt(s) ({share:.0%} of the paid GPU time) ran with no work "
                f"reported by their agents ({', '.join(silent)}): read why in `spothop status` "
                "and their boot logs; goodput counts none of that time",
            )
        )
    # Over the time whose agents reported work: the silent attempts have their own advice above,
    # and checkpointing more often would not mend a worker that never ran.
    worked_s = report.paid_gpu_s - report.unreported_gpu_s
    goodput = report.useful_gpu_s / worked_s if worked_s > 0 else None
    if goodput is not None and goodput < LOW_GOODPUT:
        where = " where work was reported" if report.unreported_gpu_s else ""
        out.append(
            Recommendation(
                "low_goodput",
                f"goodput {goodput:.0%}{where}: {1 - goodput:.0%} of the paid GPU time "
                "kept nothing; checkpoint more often or prefer calmer markets",
            )
        )
    return out


def _score(s: MarketScore) -> float:
    value = s.usd_per_effective_tflops_hour
    return float("inf") if value is None else value
