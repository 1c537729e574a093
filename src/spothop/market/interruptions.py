"""spothop's own preemption history: interruption records and instance runs, in the store.

The agent calls :meth:`InterruptionStore.record_interruption` with an
:class:`Interruption` for every preemption it survives (the market, the
notice it had, the cause);
the controller calls :meth:`InterruptionStore.record_run` when an instance
stops, so that preemptions can be divided by instance-hours. From both,
:meth:`InterruptionStore.evidence` builds the reliability evidence of each
market over a sliding window (interruption records say nothing about
capacity never asked for, so this evidence carries no availability).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, and_, func, select

from spothop.bounds import LEAD_TIME_S, UNIX_S
from spothop.db import default_database_url, shared_engine
from spothop.market.reliability import SECONDS_PER_HOUR, WINDOW_S, MarketEvidence, ReliabilityBook
from spothop.resources.market_id import MarketId
from spothop.state import ensure_schema
from spothop.state.market_tables import exposure, interruptions

GpuOf = Callable[[MarketId], str]


@dataclass(frozen=True)
class Interruption:
    """One preemption as spothop saw it.

    ``notice_kind`` is the cloud's own name for the notice; ``lead_time_s`` is
    None when there was no notice; ``time_unix_s`` is when it was taken (or
    noticed). Raises :class:`~spothop.errors.ValueOutOfRange` for a lead time
    outside 0 s … a day or a time outside 2006 … 2100.
    """

    market: MarketId
    notice_kind: str
    lead_time_s: float | None
    time_unix_s: float
    cause: str = ""
    instance_id: str = ""

    def __post_init__(self) -> None:
        if self.lead_time_s is not None:
            LEAD_TIME_S.check(self.lead_time_s, "lead_time_s")
        UNIX_S.check(self.time_unix_s, "time_unix_s")


class InterruptionStore:
    """Interruption records and instance runs (SQLite by default, PostgreSQL by URL)."""

    def __init__(self, url: str | None = None, *, engine: Engine | None = None) -> None:
        self.engine = engine or shared_engine(url or default_database_url())
        ensure_schema(self.engine)

    def record_interruption(self, interruption: Interruption) -> None:
        """Record one preemption (validated when the :class:`Interruption` was made).

        Not idempotent on purpose: two instances may be taken in the same second.
        """
        m = interruption.market
        with self.engine.begin() as conn:
            conn.execute(
                interruptions.insert().values(
                    provider=m.provider,
                    region=m.region,
                    zone=m.zone,
                    instance_type=m.instance_type,
                    notice_kind=interruption.notice_kind,
                    lead_time_s=interruption.lead_time_s,
                    time_unix_s=interruption.time_unix_s,
                    cause=interruption.cause,
                    instance_id=interruption.instance_id,
                )
            )

    def record_run(
        self, market: MarketId, start_unix_s: float, end_unix_s: float, instance_id: str = ""
    ) -> None:
        """Record that one instance ran in ``market`` from ``start`` to ``end`` (unix seconds)."""
        if end_unix_s < start_unix_s:
            raise ValueError(f"run ends ({end_unix_s}) before it starts ({start_unix_s})")
        with self.engine.begin() as conn:
            conn.execute(
                exposure.insert().values(
                    provider=market.provider,
                    region=market.region,
                    zone=market.zone,
                    instance_type=market.instance_type,
                    instance_id=instance_id,
                    start_unix_s=start_unix_s,
                    end_unix_s=end_unix_s,
                )
            )

    def interruptions(self, since_unix_s: float | None = None) -> list[Interruption]:
        query = select(interruptions).order_by(interruptions.c.time_unix_s)
        if since_unix_s is not None:
            query = query.where(interruptions.c.time_unix_s >= since_unix_s)
        with self.engine.connect() as conn:
            return [
                Interruption(
                    MarketId(r.provider, r.region, r.zone, r.instance_type),
                    r.notice_kind,
                    r.lead_time_s,
                    r.time_unix_s,
                    r.cause,
                    r.instance_id,
                )
                for r in conn.execute(query)
            ]

    def evidence(
        self, now_unix_s: float, gpu_of: GpuOf, window_s: float = WINDOW_S
    ) -> list[MarketEvidence]:
        """Per market: preemptions and instance-hours in ``[now − window_s, now]``.

        A run overlapping the window counts only its part inside it; mean
        lifetime is instance-seconds in the window per preemption.
        """
        since = now_unix_s - window_s
        seconds: dict[MarketId, float] = defaultdict(float)
        with self.engine.connect() as conn:
            runs = conn.execute(
                select(exposure).where(
                    and_(exposure.c.end_unix_s >= since, exposure.c.start_unix_s <= now_unix_s)
                )
            )
            for r in runs:
                market = MarketId(r.provider, r.region, r.zone, r.instance_type)
                seconds[market] += min(r.end_unix_s, now_unix_s) - max(r.start_unix_s, since)
        counts: dict[MarketId, int] = defaultdict(int)
        for event in self.interruptions(since):
            if event.time_unix_s <= now_unix_s:
                counts[event.market] += 1
        return [
            MarketEvidence(
                market=m,
                gpu=gpu_of(m),
                instance_hours=seconds[m] / SECONDS_PER_HOUR,
                preemptions=counts[m],
                lifetime_s_total=seconds[m],
                lifetimes_ended=counts[m],
                source="spothop interruptions",
            )
            for m in sorted(set(seconds) | set(counts))
        ]


def record_interruption(interruption: Interruption, url: str | None = None) -> None:
    """:meth:`InterruptionStore.record_interruption` on the store at ``url`` (default: the default
    store); the agent's entry point."""
    InterruptionStore(url).record_interruption(interruption)


def catalog_gpu_of() -> GpuOf:
    """A market's GPU label from the catalog (``"unknown"`` for a type it lacks)."""
    from spothop.market.price_store import catalog_gpu_lookup

    lookup = catalog_gpu_lookup()
    return lambda m: known[0] if (known := lookup(m.provider, m.instance_type)) else "unknown"


def reliability_from_store(
    now_unix_s: float,
    url: str | None = None,
    window_s: float = WINDOW_S,
    gpu_of: GpuOf | None = None,
) -> ReliabilityBook:
    """The reliability book of spothop's own interruption history over the window ending ``now``."""
    evidence = InterruptionStore(url).evidence(now_unix_s, gpu_of or catalog_gpu_of(), window_s)
    return ReliabilityBook.from_evidence(evidence)


class HistoryBook:
    """:func:`reliability_from_store` for a caller that asks every few seconds (the controller).

    Call it with ``now`` (unix seconds, the providers' clock) for the book of
    the window ending then. The store is opened once; each call costs one
    small query (the newest interruption and run ids), and the book is built
    again only when one of them moved or ``now`` is ``refresh_s`` past the
    last build (the window slid) — else the last book is handed back.
    ``builds`` counts the books built.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        window_s: float = WINDOW_S,
        refresh_s: float = 300.0,
        gpu_of: GpuOf | None = None,
    ) -> None:
        self.history = InterruptionStore(url, engine=engine)
        self.window_s = window_s
        self.refresh_s = refresh_s
        self._gpu_of = gpu_of
        self._book: ReliabilityBook | None = None
        self._built_at = float("-inf")
        self._marks: tuple[int | None, int | None] | None = None
        self.builds = 0

    def _newest(self) -> tuple[int | None, int | None]:
        query = select(
            select(func.max(interruptions.c.id)).scalar_subquery(),
            select(func.max(exposure.c.id)).scalar_subquery(),
        )
        with self.history.engine.connect() as conn:
            row = conn.execute(query).one()
        return row[0], row[1]

    def __call__(self, now_unix_s: float) -> ReliabilityBook:
        marks = self._newest()
        fresh = abs(now_unix_s - self._built_at) < self.refresh_s
        if self._book is not None and marks == self._marks and fresh:
            return self._book
        if self._gpu_of is None:
            self._gpu_of = catalog_gpu_of()
        evidence = self.history.evidence(now_unix_s, self._gpu_of, self.window_s)
        self._book = ReliabilityBook.from_evidence(evidence)
        self._built_at, self._marks = now_unix_s, marks
        self.builds += 1
        return self._book


def mean_time_between_preemptions_s(
    market: MarketId,
    now_unix_s: float | None = None,
    url: str | None = None,
    gpu: str | None = None,
) -> float:
    """``1/λ`` for ``market`` in seconds, from the store's history (priors where it has none).

    For the checkpoint interval; with no history at all this is the default
    prior's ``1 / DEFAULT_PRIOR_RATE_PER_H``.
    """
    now = time.time() if now_unix_s is None else now_unix_s
    return reliability_from_store(now, url).mean_time_between_preemptions_s(market, gpu)
