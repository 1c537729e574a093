"""The cost ledger: one billing record per instance attempt, and its reconciliation with the cloud's bill.

The contract:

1. **One record per attempt** (``job_attempts``), keyed by its attempt id:
   job, node, provider, region, zone, instance type, market (spot /
   on-demand / reserved), the price in force (``price_usd_per_hour``, its
   ``currency`` and ``rate_source``), running and billed seconds under the
   provider's :class:`~spothop.providers.base.BillingRule`, and the charge in
   integer micro-dollars. Every recovery is an attempt of the same job, so a
   job's cost is the sum of its records, whatever clouds it crossed.
2. **spothop's own books, the cloud's rates.** The charge is computed here,
   from the instance's running time on the provider's clock
   (``Instance.running_at`` … ``ended_at``), the provider's billing rule and
   the rates in force; the provider's own figure (``Instance.cost_microusd``)
   is kept beside it, never used for it, so :meth:`Ledger.reconcile` compares
   two independent sums.
3. **A missing price is missing.** An attempt without a usable price has
   ``cost_microusd`` None and is listed as such; it never counts as 0.
4. **Closed records stay.** Once the instance has ended, its record is
   written for good: later updates leave it as it is, so a report still
   holds after the cloud forgot the instance. An open record (still running)
   is rewritten at each :meth:`Ledger.update` from the provider's count so far.
5. **Fallback clock.** When the provider is not available or no longer knows
   the instance, the running time comes from the attempt's own times
   (``clock`` ``store``) and there is no provider figure to reconcile.
6. **Closed when the attempt ends.** The controller calls
   :func:`close_books` after each pass's actions (:func:`close_ended`): an attempt that ended gets
   its record then (not only when a report runs), closed once the cloud has
   ended its instance, and a spot attempt's running
   time goes to the market's preemption history
   (:meth:`~spothop.market.interruptions.InterruptionStore.record_run`), the
   denominator of λ. Best effort: a failure is logged and the next
   :meth:`Ledger.update` (every report) still writes the record.
7. **Moving spot prices.** A spot attempt on a cloud that keeps a price
   history (:class:`~spothop.providers.billing.SpotPriceHistory`) is priced
   from it, one line per price step, as :mod:`spothop.providers.billing`
   bills (``rate_source`` ``cloud``): the rule the local cloud's hosts bill
   by, so the books agree to the micro-dollar, whether or not the controller
   was alive to see the steps. Elsewhere it is priced with the spot prices the
   controller observed over its run (:func:`record_observed_prices`, in the
   price history; ``rate_source`` ``observed``): their time-weighted mean
   (:func:`price_over`), the placement price where none moved it.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from spothop.db import dialect_insert
from spothop.errors import SpothopError
from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.market.identity import PriceSeriesKey
from spothop.market.interruptions import InterruptionStore
from spothop.market.price_store import PriceStore
from spothop.observe.billing import Charge, charge, known_price, usd
from spothop.providers.base import BillingRule, Instance, InstanceState, Provider
from spothop.providers.billing import (
    BillingLine,
    SpotPriceHistory,
    billed_price_steps,
    billing_lines,
)
from spothop.resources.market_id import MarketId
from spothop.state.job_tables import job_attempts
from spothop.state.ledger_tables import ledger_records
from spothop.state.market_tables import exposure

log = logging.getLogger(__name__)

CURRENCY = "USD"
RATE_PLACED = "placement"  # the price the controller placed the attempt at (the cloud's quote)
RATE_OBSERVED = "observed"  # the mean of the spot prices the controller saw over the run
RATE_CLOUD = "cloud"  # the cloud's own price history, billed line by line as the cloud bills
SOURCE_OBSERVED = "controller"  # price_store source of the controller's observed prices
CLOCK_PROVIDER = "provider"
CLOCK_STORE = "store"
UNKNOWN_RULE = BillingRule(source="unknown: the provider was not available")
_RUNNING = (InstanceState.RUNNING, InstanceState.NOTICED)


@dataclass(frozen=True)
class LedgerRecord:
    """One attempt's billing record (see the module's contract)."""

    attempt_id: str
    job_id: str
    node: int
    provider: str
    region: str
    zone: str
    instance_type: str
    market_kind: str
    instance_id: str | None
    currency: str
    price_usd_per_hour: float | None
    rate_source: str
    clock: str
    usage_start_unix_s: float | None
    usage_end_unix_s: float | None
    usage_s: float
    billed_s: float
    cost_microusd: int | None
    provider_cost_microusd: int | None
    rule: Mapping[str, Any]
    tags: Mapping[str, str]
    closed: bool

    @property
    def price_missing(self) -> bool:
        return self.cost_microusd is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``cost_usd`` beside the micro-dollars."""
        return {
            "attempt_id": self.attempt_id,
            "job_id": self.job_id,
            "node": self.node,
            "provider": self.provider,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "market": self.market_kind,
            "instance_id": self.instance_id,
            "currency": self.currency,
            "price_usd_per_hour": self.price_usd_per_hour,
            "price_missing": self.price_missing,
            "rate_source": self.rate_source,
            "clock": self.clock,
            "usage_start_unix_s": self.usage_start_unix_s,
            "usage_end_unix_s": self.usage_end_unix_s,
            "usage_s": self.usage_s,
            "billed_s": self.billed_s,
            "cost_microusd": self.cost_microusd,
            "cost_usd": usd(self.cost_microusd),
            "provider_cost_microusd": self.provider_cost_microusd,
            "rule": dict(self.rule),
            "tags": dict(self.tags),
            "closed": self.closed,
        }


@dataclass(frozen=True)
class ReconcileLine:
    """One attempt: the ledger's charge, the provider's, and their difference (provider − ledger)."""

    attempt_id: str
    instance_id: str | None
    provider: str
    ledger_microusd: int | None
    provider_microusd: int | None

    @property
    def difference_microusd(self) -> int | None:
        if self.ledger_microusd is None or self.provider_microusd is None:
            return None
        return self.provider_microusd - self.ledger_microusd

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt_id": self.attempt_id,
            "instance_id": self.instance_id,
            "provider": self.provider,
            "ledger_microusd": self.ledger_microusd,
            "provider_microusd": self.provider_microusd,
            "difference_microusd": self.difference_microusd,
        }


@dataclass(frozen=True)
class Reconciliation:
    """The ledger against the providers' bills: matched lines, and those one side cannot price."""

    lines: tuple[ReconcileLine, ...] = field(default_factory=tuple)

    @property
    def matched(self) -> tuple[ReconcileLine, ...]:
        return tuple(line for line in self.lines if line.difference_microusd is not None)

    @property
    def unmatched(self) -> tuple[ReconcileLine, ...]:
        """Lines without a figure on one side (a missing price, a cloud that did not say)."""
        return tuple(line for line in self.lines if line.difference_microusd is None)

    @property
    def ledger_microusd(self) -> int:
        return sum(line.ledger_microusd or 0 for line in self.matched)

    @property
    def provider_microusd(self) -> int:
        return sum(line.provider_microusd or 0 for line in self.matched)

    @property
    def difference_microusd(self) -> int:
        """Provider − ledger over the matched lines (0: the books agree)."""
        return sum(line.difference_microusd or 0 for line in self.matched)

    @property
    def differing(self) -> tuple[ReconcileLine, ...]:
        return tuple(line for line in self.matched if line.difference_microusd != 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ledger_microusd": self.ledger_microusd,
            "provider_microusd": self.provider_microusd,
            "difference_microusd": self.difference_microusd,
            "differing": [line.to_dict() for line in self.differing],
            "unmatched": [line.to_dict() for line in self.unmatched],
            "lines": [line.to_dict() for line in self.lines],
        }


Clock = Callable[[], float]


class Ledger:
    """The ledger on a job store's database, priced with ``providers`` (by name)."""

    def __init__(
        self,
        store: JobStore,
        providers: Mapping[str, Provider] | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.providers = dict(providers or {})
        self._clock: Clock = clock or time.time

    # --- writing ----------------------------------------------------------------------

    def update(
        self, job_id: str | None = None, attempts: Sequence[AttemptRecord] | None = None
    ) -> list[LedgerRecord]:
        """Bring the records of ``job_id``'s attempts (every job's if None) up to date; returns them all.

        ``attempts``: those attempts, when the caller has just read them."""
        closed = {r.attempt_id for r in self.records(job_id) if r.closed}
        if attempts is None:
            attempts = self.store.attempts(job_id)
        self._write([self.price(a) for a in attempts if a.attempt_id not in closed])
        return self.records(job_id)

    def close(self, attempt_id: str) -> LedgerRecord:
        """Write one attempt's record now (a closed one stays as stored); returns it.

        A spot record that is closed (now or before) also has its run in the
        market's history (:func:`record_run`, once per instance).
        """
        stored = self.records(attempt_id=attempt_id)
        if stored and stored[0].closed:
            record_run(self.store, stored[0])
            return stored[0]
        record = self.price(self.store.attempt(attempt_id))
        self._write([record])
        return record

    def _write(self, fresh: list[LedgerRecord]) -> None:
        if not fresh:
            return
        # Runs first: a closed record is then never seen without its run in the history.
        for record in fresh:
            try:
                record_run(self.store, record)  # also the report's catch-up for a hook that failed
            except Exception as exc:
                log.warning("run of attempt %s not recorded: %s", record.attempt_id, exc)
        now = self._clock()
        rows = {r.attempt_id: _row(r, now) for r in fresh}  # one row per key (the last given)
        with self.store.engine.begin() as conn:
            conn.execute(_upsert_records(conn.dialect.name), list(rows.values()))

    def price(self, attempt: AttemptRecord) -> LedgerRecord:
        """The record of one attempt, as the ledger prices it now (nothing written)."""
        provider = self.providers.get(attempt.provider)
        rule = provider.capabilities.billing if provider is not None else UNKNOWN_RULE
        instance = _describe(provider, attempt.instance_id)
        price = known_price(attempt.price_usd_per_hour, reserved=attempt.market_kind == "reserved")
        if instance is not None:
            start, end, usage_s, closed = _provider_usage(instance)
            clock, provider_cost = CLOCK_PROVIDER, instance.cost_microusd
            tags = {**dict(instance.tags)}
        else:
            start, end, usage_s, closed = self._store_usage(attempt)
            clock, provider_cost, tags = CLOCK_STORE, None, {}
        rate_source = RATE_PLACED
        billed: Charge | None = None
        if attempt.market_kind == "spot" and start is not None and usage_s > 0:
            lines = _cloud_lines(provider, rule, attempt, instance, start, start + usage_s)
            if lines is not None:
                billed = _sum_lines(usage_s, lines)
                price, rate_source = _mean_price(lines), RATE_CLOUD
            elif price is not None:
                observed = self._observed(attempt, rule, price, start, start + usage_s)
                if observed is not None:
                    price, rate_source = observed, RATE_OBSERVED
        tags.setdefault("spothop-job", attempt.job_id)
        tags.setdefault("spothop-node", str(attempt.node))
        if billed is None:
            billed = charge(rule, usage_s, price)
        return LedgerRecord(
            attempt_id=attempt.attempt_id,
            job_id=attempt.job_id,
            node=attempt.node,
            provider=attempt.provider,
            region=attempt.region,
            zone=attempt.zone,
            instance_type=attempt.instance_type,
            market_kind=attempt.market_kind,
            instance_id=attempt.instance_id,
            currency=CURRENCY,
            price_usd_per_hour=price,
            rate_source=rate_source,
            clock=clock,
            usage_start_unix_s=start,
            usage_end_unix_s=end,
            usage_s=billed.usage_s,
            billed_s=billed.billed_s,
            cost_microusd=billed.cost_microusd,
            provider_cost_microusd=provider_cost,
            rule=rule.to_dict(),
            tags=tags,
            closed=closed,
        )

    def _observed(
        self, attempt: AttemptRecord, rule: BillingRule, placed: float, start: float, end: float
    ) -> float | None:
        """The mean spot price in force over ``start … end`` from the prices the controller
        observed (:func:`record_observed_prices`); None when none moved it off ``placed``.

        A step function: the placement price from launch (it holds through the
        rule's ``price_fixed_s`` protection), then each observed price from the
        time the cloud quoted it until the next.
        """
        market = MarketId.of(attempt.provider, attempt.region, attempt.zone, attempt.instance_type)
        since = attempt.launched_unix_s + rule.price_fixed_s
        points = [
            (p.timestamp.timestamp(), p.price_usd_per_hour)
            for p in _prices(self.store).points(
                series=PriceSeriesKey(market, True, ""),
                since=datetime.fromtimestamp(since, tz=UTC),
                until=datetime.fromtimestamp(end, tz=UTC),
            )
            if p.source == SOURCE_OBSERVED
        ]
        return price_over(points, placed, start, end)

    def _store_usage(
        self, attempt: AttemptRecord
    ) -> tuple[float | None, float | None, float, bool]:
        start = attempt.running_unix_s
        closed = not attempt.live
        end = attempt.ended_unix_s if closed else None
        if start is None:
            return None, end, 0.0, closed
        until = end if end is not None else self._clock()
        return start, end, max(0.0, until - start), closed

    # --- reading ----------------------------------------------------------------------

    def records(
        self,
        job_id: str | None = None,
        *,
        since_unix_s: float | None = None,
        attempt_id: str | None = None,
    ) -> list[LedgerRecord]:
        """Stored records (one job's, or every job's, or one attempt's), by usage start; ``since``: ended after it or open."""
        query = select(ledger_records).order_by(
            ledger_records.c.usage_start_unix_s, ledger_records.c.attempt_id
        )
        if job_id is not None:
            query = query.where(ledger_records.c.job_id == job_id)
        if attempt_id is not None:
            query = query.where(ledger_records.c.attempt_id == attempt_id)
        if since_unix_s is not None:
            query = query.where(
                ledger_records.c.usage_end_unix_s.is_(None)
                | (ledger_records.c.usage_end_unix_s >= since_unix_s)
            )
        with self.store.engine.connect() as conn:
            return [_record(dict(r._mapping)) for r in conn.execute(query)]

    def reconcile(self, job_id: str | None = None) -> Reconciliation:
        """The stored records against what each provider billed (update first for fresh figures)."""
        return reconcile(self.records(job_id))


def price_over(
    points: Sequence[tuple[float, float]], placed: float, start: float, end: float
) -> float | None:
    """The time-weighted mean of a step price over ``start … end`` (``end`` > ``start``).

    ``points`` are ``(unix s, USD per hour)``, oldest first: each is in force
    from its time until the next; before the first, ``placed``. None when no
    point changes the price in force over the interval (``placed`` stands).
    """
    current = placed
    for t, p in points:
        if t <= start:
            current = p
    segments: list[tuple[float, float]] = []
    at = start
    for t, p in points:
        if start < t < end:
            segments.append((current, t - at))
            at, current = t, p
    segments.append((current, end - at))
    prices = {p for p, _ in segments}
    if prices == {placed}:
        return None
    if len(prices) == 1:
        return segments[0][0]
    return sum(p * dt for p, dt in segments) / (end - start)


def _cloud_lines(
    provider: Provider | None,
    rule: BillingRule,
    attempt: AttemptRecord,
    instance: Instance | None,
    start: float,
    end: float,
) -> list[BillingLine] | None:
    """A spot attempt's bill from its cloud's own price history (spothop.providers.billing),
    or None when the cloud keeps none or cannot say now (the observed prices stand in)."""
    if not isinstance(provider, SpotPriceHistory) or instance is None:
        return None
    try:
        steps = billed_price_steps(
            rule,
            instance.launched_at,
            start,
            end,
            lambda a, b: provider.spot_price_steps(
                attempt.region, attempt.zone or None, attempt.instance_type, a, b
            ),
        )
    except SpothopError as exc:
        log.warning("price history of attempt %s not read: %s", attempt.attempt_id, exc)
        return None
    return billing_lines(rule, start, end, steps)


def _sum_lines(usage_s: float, lines: Sequence[BillingLine]) -> Charge:
    return Charge(
        usage_s, sum(line.billed_s for line in lines), sum(line.cost_microusd for line in lines)
    )


def _mean_price(lines: Sequence[BillingLine]) -> float:
    """The lines' price weighted by their billed seconds (the one price when they share it)."""
    prices = {line.price_usd_per_hour for line in lines}
    billed = sum(line.billed_s for line in lines)
    if len(prices) == 1 or billed <= 0:
        return lines[0].price_usd_per_hour
    return sum(line.price_usd_per_hour * line.billed_s for line in lines) / billed


def record_observed_prices(store: JobStore, observation: Any) -> int:
    """Store this pass's spot price of each market a live spot attempt runs in; points written.

    ``observation`` is the controller's (``attempts`` by job, ``market`` the
    market view: prices on the providers' clock at ``market.now``). A price
    equal to the last one recorded for its market in this process is not
    written again (a step function needs only the changes). Never raises.
    """
    try:
        view = observation.market
        when = float(view.now)
        points: list[_Quote] = []
        for attempts in observation.attempts.values():
            for a in attempts:
                if not a.live or a.market_kind != "spot":
                    continue
                market = MarketId.of(a.provider, a.region, a.zone, a.instance_type)
                price = view.state_of(market).spot_price_usd_per_hour
                key = (id(store.engine), market)
                if price is None or _LAST_QUOTED.get(key) == price or when <= 0:
                    continue
                _LAST_QUOTED[key] = price
                points.append(_Quote(market, float(price), when))
        if not points:
            return 0
        return _prices(store).record_prices(points, source=SOURCE_OBSERVED).added
    except Exception as exc:
        log.warning("observed spot prices not recorded: %s", exc)
        return 0


def close_books(store: JobStore, providers: Mapping[str, Provider], observation: Any) -> None:
    """The controller's one hook after each pass's actions: prices observed, then :func:`close_ended`."""
    if observation is not None:
        record_observed_prices(store, observation)
    close_ended(store, providers)


@dataclass(frozen=True)
class _Quote:
    market: MarketId
    price_usd_per_hour: float
    timestamp: float

    @property
    def provider(self) -> str:
        return self.market.provider

    @property
    def region(self) -> str:
        return self.market.region

    @property
    def zone(self) -> str | None:
        return self.market.zone or None

    @property
    def instance_type(self) -> str:
        return self.market.instance_type


_LAST_QUOTED: dict[tuple[int, MarketId], float] = {}
_PRICE_STORES: dict[int, PriceStore] = {}


def _prices(store: JobStore) -> PriceStore:
    """The price history on the job store's database (opened once per engine)."""
    key = id(store.engine)
    if key not in _PRICE_STORES:
        _PRICE_STORES[key] = PriceStore(engine=store.engine)
    return _PRICE_STORES[key]


def close_ended(store: JobStore, providers: Mapping[str, Provider]) -> list[LedgerRecord]:
    """The controller's hook, once a pass: close the books of every attempt that has ended.

    An ended attempt without a closed record gets one (:func:`close_attempt`):
    its instance, if the cloud still runs it (a finished worker's instance
    awaiting termination), keeps an open record until a pass sees it ended,
    so the record closes on the first pass after the cloud ends the instance.
    One query a pass when nothing is pending. Never raises (a failure is logged).
    """
    try:
        closed = select(ledger_records.c.attempt_id).where(ledger_records.c.closed.is_(True))
        query = (
            select(job_attempts.c.attempt_id)
            .where(job_attempts.c.state == AttemptState.ENDED.value)
            .where(job_attempts.c.attempt_id.not_in(closed))
            .order_by(job_attempts.c.attempt_id)
        )
        with store.engine.connect() as conn:
            pending = [row[0] for row in conn.execute(query)]
    except Exception as exc:
        log.warning("ledger: ended attempts not read: %s", exc)
        return []
    return [r for r in (close_attempt(store, a, providers) for a in pending) if r is not None]


def close_attempt(
    store: JobStore, attempt_id: str, providers: Mapping[str, Provider]
) -> LedgerRecord | None:
    """The controller's hook where an attempt ends: its ledger record, and its run in the market.

    Writes the attempt's record (closed, priced on the provider's clock where
    the provider still knows the instance) and, for a spot attempt that ran,
    records its running time in the store's preemption history (once per
    instance), so λ = preemptions ÷ hours actually run. Never raises: a
    failure is logged and None returned (the next report's
    :meth:`Ledger.update` catches the record up; a run not recorded is
    missing from λ's hours, which errs towards a higher λ).
    """
    try:
        return Ledger(store, providers).close(attempt_id)
    except Exception as exc:  # the ledger must never break the controller's pass
        log.warning("ledger record of attempt %s not written: %s", attempt_id, exc)
        return None


def record_run(store: JobStore, record: LedgerRecord) -> bool:
    """Record a closed spot record's running time in the store's preemption history; True if written.

    Skipped (False) for an open record, an on-demand or reserved one (they
    are not preempted: their hours would dilute the spot market's λ), one
    that never ran, or an instance already recorded.
    """
    start, end = record.usage_start_unix_s, record.usage_end_unix_s
    if not record.closed or record.market_kind != "spot" or start is None or end is None:
        return False
    if end <= start:
        return False
    instance_id = record.instance_id or record.attempt_id
    with store.engine.connect() as conn:
        seen = conn.execute(
            select(exposure.c.id).where(
                (exposure.c.provider == record.provider) & (exposure.c.instance_id == instance_id)
            )
        ).first()
    if seen is not None:
        return False
    market = MarketId.of(record.provider, record.region, record.zone, record.instance_type)
    InterruptionStore(engine=store.engine).record_run(market, start, end, instance_id)
    return True


def reconcile(records: Iterable[LedgerRecord]) -> Reconciliation:
    """Each record's charge beside the provider's own (see :class:`Reconciliation`).

    An attempt that never had an instance (a launch the cloud refused, or one cut
    before the cloud answered) and that the ledger charges nothing has no bill to
    match on either side: it is left out, not listed as unmatched. One that the
    ledger charges without an instance is kept: that is a discrepancy to show.
    """
    return Reconciliation(
        tuple(
            ReconcileLine(
                r.attempt_id, r.instance_id, r.provider, r.cost_microusd, r.provider_cost_microusd
            )
            for r in records
            if not _never_billed(r)
        )
    )


def _never_billed(record: LedgerRecord) -> bool:
    return record.instance_id is None and record.cost_microusd == 0


def total_microusd(records: Iterable[LedgerRecord]) -> int:
    """The sum of the priced records (missing prices are not 0: list them with ``price_missing``)."""
    return sum(r.cost_microusd for r in records if r.cost_microusd is not None)


def _describe(provider: Provider | None, instance_id: str | None) -> Instance | None:
    if provider is None or instance_id is None:
        return None
    try:
        return provider.describe(instance_id)
    except SpothopError:
        return None  # the cloud no longer knows it (or cannot be asked): the store's times stand in


def _provider_usage(instance: Instance) -> tuple[float | None, float | None, float, bool]:
    """Running time on the provider's clock: from running_at (or launch) to its end."""
    closed = not instance.state.is_alive
    start = instance.running_at
    if start is None and (instance.billed_seconds > 0 or instance.state in _RUNNING):
        start = instance.launched_at  # a cloud that does not say when billing began: from launch
    if start is None:
        return None, instance.ended_at, 0.0, closed
    if instance.ended_at is not None:
        return start, instance.ended_at, max(0.0, instance.ended_at - start), closed
    # Still running: the provider's count so far (its clock's now is the cloud's to know).
    return start, None, instance.billed_seconds, closed


@functools.cache
def _upsert_records(dialect: str) -> Any:
    """Insert-or-update of a record, one statement (two writers at once, a controller pass and a
    report, each leave a whole record: a delete-then-insert let the second one's insert hit the
    first one's row, a duplicate key). A closed record stays as stored: it is never reopened."""
    upsert = dialect_insert(dialect)(ledger_records)
    return upsert.on_conflict_do_update(
        index_elements=["attempt_id"],
        set_={c.name: upsert.excluded[c.name] for c in ledger_records.c if c.name != "attempt_id"},
        where=~ledger_records.c.closed,
    )


def _row(r: LedgerRecord, now: float) -> dict[str, Any]:
    return {
        "attempt_id": r.attempt_id,
        "job_id": r.job_id,
        "node": r.node,
        "provider": r.provider,
        "region": r.region,
        "zone": r.zone,
        "instance_type": r.instance_type,
        "market_kind": r.market_kind,
        "instance_id": r.instance_id,
        "currency": r.currency,
        "price_usd_per_hour": r.price_usd_per_hour,
        "rate_source": r.rate_source,
        "clock": r.clock,
        "usage_start_unix_s": r.usage_start_unix_s,
        "usage_end_unix_s": r.usage_end_unix_s,
        "usage_s": r.usage_s,
        "billed_s": r.billed_s,
        "cost_microusd": r.cost_microusd,
        "provider_cost_microusd": r.provider_cost_microusd,
        "rule_json": json.dumps(dict(r.rule)),
        "tags_json": json.dumps(dict(r.tags)),
        "closed": r.closed,
        "updated_unix_s": now,
    }


def _record(m: Mapping[str, Any]) -> LedgerRecord:
    values = {k: v for k, v in m.items() if k not in ("rule_json", "tags_json", "updated_unix_s")}
    return LedgerRecord(
        **values,
        rule=json.loads(m["rule_json"]),
        tags=json.loads(m["tags_json"]),
    )
