"""A job's timeline of instances and preemptions across providers, as data and as a picture.

:func:`job_timeline` is the data (one bar per attempt: node, provider, zone,
type, market, from running — else launch — to end or now, how it ended, when
a notice came); the dashboard's ``/api/timeline`` serves it and
:func:`plot_timeline` draws it with matplotlib (``spothop report JOB --plot
out.png``; the ``plot`` extra). :func:`cost_series` is the cumulative cost
of a set of attempts against what on-demand would have cost, over time, on
the store's clock (the ledger is the books; this is the picture).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from spothop.errors import ConfigError
from spothop.jobs.lifecycle import EndReason
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore


@dataclass(frozen=True)
class Bar:
    """One attempt on the timeline (unix seconds; ``end_unix_s`` None: still alive)."""

    attempt_id: str
    node: int
    provider: str
    zone: str
    instance_type: str
    market: str
    instance_id: str | None
    start_unix_s: float
    end_unix_s: float | None
    noticed_unix_s: float | None
    end_reason: str | None
    state: str
    price_usd_per_hour: float

    @property
    def preempted(self) -> bool:
        """The cloud took it, or gave notice it would (then spothop ended it once its
        replacement ran, make-before-break): an interruption either way."""
        return self.end_reason == EndReason.PREEMPTED.value or self.noticed_unix_s is not None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "preempted": self.preempted}


def bars(attempts: Iterable[AttemptRecord]) -> list[Bar]:
    """The attempts as bars, by start."""
    out = [
        Bar(
            attempt_id=a.attempt_id,
            node=a.node,
            provider=a.provider,
            zone=a.zone,
            instance_type=a.instance_type,
            market=a.market_kind,
            instance_id=a.instance_id,
            start_unix_s=a.running_unix_s if a.running_unix_s is not None else a.launched_unix_s,
            end_unix_s=a.ended_unix_s,
            noticed_unix_s=a.noticed_unix_s,
            end_reason=a.end_reason.value if a.end_reason is not None else None,
            state=a.state.value,
            price_usd_per_hour=a.price_usd_per_hour,
        )
        for a in attempts
    ]
    return sorted(out, key=lambda b: (b.start_unix_s, b.node, b.attempt_id))


def job_timeline(store: JobStore, job_id: str) -> list[Bar]:
    """The bars of ``job_id``'s attempts (:class:`~spothop.jobs.errors.JobNotFound` if unknown)."""
    store.get_job(job_id)
    return bars(store.attempts(job_id))


def cost_series(
    attempts: Sequence[AttemptRecord],
    on_demand_usd_per_hour: Mapping[tuple[str, str, str], float],
    *,
    now: float | None = None,
    points: int = 60,
) -> dict[str, Any]:
    """Cumulative cost and on-demand-equivalent cost at ``points`` times from the first start to now.

    ``on_demand_usd_per_hour`` by (provider, zone, instance type) — else (provider, region,
    type); an attempt whose on-demand price is missing counts at its own price on both lines
    and is listed in ``missing`` (never as zero).
    """
    now = time.time() if now is None else now
    spans = [
        (a, a.running_unix_s, a.ended_unix_s if a.ended_unix_s is not None else now)
        for a in attempts
        if a.running_unix_s is not None
    ]
    if not spans:
        return {"time_unix_s": [], "cost_usd": [], "on_demand_usd": [], "missing": []}
    start = min(s for _, s, _ in spans)
    end = max(now, max(e for _, _, e in spans))
    step = (end - start) / max(1, points - 1)
    times = [start + i * step for i in range(points)]
    missing: list[str] = []
    od_price: dict[str, float] = {}
    for a, _, _ in spans:
        od = on_demand_usd_per_hour.get((a.provider, a.zone, a.instance_type))
        if od is None:
            od = on_demand_usd_per_hour.get((a.provider, a.region, a.instance_type))
        if od is None:
            missing.append(a.attempt_id)
            od = a.price_usd_per_hour
        od_price[a.attempt_id] = od
    cost, od_cost = [], []
    for t in times:
        c = o = 0.0
        for a, s, e in spans:
            hours = max(0.0, min(t, e) - s) / 3600.0
            c += a.price_usd_per_hour * hours
            o += od_price[a.attempt_id] * hours
        cost.append(c)
        od_cost.append(o)
    return {"time_unix_s": times, "cost_usd": cost, "on_demand_usd": od_cost, "missing": missing}


def plot_timeline(
    timeline: Sequence[Bar], path: Path, title: str = "", now: float | None = None
) -> Path:
    """Draw the bars (one row per node, coloured by provider, preemptions marked ✕) to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'spothop[plot]'") from None
    now = time.time() if now is None else now
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * max(1, len({b.node for b in timeline}))))
    origin = min((b.start_unix_s for b in timeline), default=now)
    providers = sorted({b.provider for b in timeline})
    colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(providers)}
    for b in timeline:
        left = (b.start_unix_s - origin) / 60.0
        right = ((b.end_unix_s if b.end_unix_s is not None else now) - origin) / 60.0
        ax.barh(
            b.node,
            max(right - left, 0.01),
            left=left,
            color=colours[b.provider],
            edgecolor="black",
            hatch="//" if b.market == "on-demand" else None,
            alpha=0.85,
        )
        ax.text(left, b.node + 0.3, f"{b.zone} {b.instance_type}", fontsize=7)
        if b.preempted:
            ax.plot(right, b.node, marker="x", color="red", markersize=10, mew=2)
    for p in providers:
        ax.barh([], [], color=colours[p], label=p)
    ax.plot([], [], "x", color="red", label="preempted")
    ax.set_xlabel("minutes since the first instance")
    ax.set_ylabel("node")
    ax.set_yticks(sorted({b.node for b in timeline}) or [0])
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "instances and preemptions")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
