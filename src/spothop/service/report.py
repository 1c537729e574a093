"""What jobs cost: ``spothop report JOB`` / ``GET /v1/jobs/{id}/report`` (one job, against
on-demand, with recommendations) and ``spothop report --since S --by B`` / ``GET /v1/costs``
(the ledger summed per group across jobs).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.store import JobStore
    from spothop.observe.recommend import Recommendation
    from spothop.observe.report import JobReport, Split
    from spothop.providers.base import Provider


@dataclass(frozen=True)
class ReportWithAdvice:
    """A job's report (:class:`~spothop.observe.report.JobReport`) and what to change next time:
    ``to_dict()`` is the report's own dict with ``recommendations`` added."""

    report: JobReport
    recommendations: tuple[Recommendation, ...]
    # Why the job is in its state (a budget reached, a deadline missed, a failure): the job's own.
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.report.to_dict(),
            "reason": self.reason,
            "recommendations": [a.to_dict() for a in self.recommendations],
        }


def job_report(store: JobStore, job_id: str, providers: Mapping[str, Provider]) -> ReportWithAdvice:
    """The job's report (its ledger brought up to date) and its recommendations. An unknown job
    is :class:`~spothop.observe.job_report.UnknownJob` naming the nearest ids."""
    from spothop.observe.job_report import job_report as report_of
    from spothop.observe.recommend import recommend

    data = report_of(store, job_id, providers)
    return ReportWithAdvice(data, tuple(recommend(data)), store.get_job(job_id).reason)


@dataclass(frozen=True)
class CostQuery:
    """Which spend :func:`costs` sums: attempts launched in the last ``since`` (a span like 30d,
    12h or 2w) or still live, grouped ``by`` one of :data:`~spothop.observe.report.GROUPINGS`,
    of the jobs in ``job_ids`` when given (the server passes a user's project's)."""

    since: str = "30d"
    by: str = "provider"
    job_ids: Collection[str] | None = None


@dataclass(frozen=True)
class CostSummary:
    """The ledger summed per group: ``report --since S --by B --json`` and ``GET /v1/costs``."""

    since: str
    by: str
    groups: tuple[Split, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"since": self.since, "by": self.by, "groups": [s.to_dict() for s in self.groups]}


def costs(
    store: JobStore, providers: Mapping[str, Provider], query: CostQuery = CostQuery()
) -> CostSummary:
    """The ledger (brought up to date) summed per group over the attempts ``query`` keeps.
    :class:`~spothop.errors.ConfigError` for a bad span or grouping, naming the flag."""
    from spothop.errors import ConfigError
    from spothop.jobs.spec_values import parse_duration_s
    from spothop.observe.ledger import Ledger
    from spothop.observe.report import GROUPINGS, split_records

    since, by, job_ids = query.since, query.by, query.job_ids
    if by not in GROUPINGS:
        raise ConfigError(f"--by {by!r}: use one of {', '.join(GROUPINGS)}")
    try:
        span_s = float(parse_duration_s(since))
    except (TypeError, ValueError):
        raise ConfigError(f"--since {since!r}: use a span like 30d, 12h or 2w") from None
    cutoff = time.time() - span_s
    attempts = store.attempts()
    recent = {
        a.attempt_id
        for a in attempts
        if (a.live or a.launched_unix_s >= cutoff) and (job_ids is None or a.job_id in job_ids)
    }
    preempted = frozenset(a.attempt_id for a in attempts if a.interrupted)
    records = [r for r in Ledger(store, providers).update() if r.attempt_id in recent]
    return CostSummary(since, by, tuple(split_records(records, by, preempted)))
