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
   two independent sums — where that figure is a bill (the provider's
   ``Capabilities.bill_source``); elsewhere it is the adapter's estimate and
   the provider is "estimated, not reconciled" (:mod:`.reconcile`).
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

Here: :class:`Ledger` (writing, pricing and reading records) and the
controller's hooks that close the books (rule 6). Beside it, and re-exported
here: the record and its row in :mod:`spothop.observe.ledger_record`, which
rate an attempt is charged at (rule 7) in :mod:`spothop.observe.rates`, the
comparison with the cloud's bill in :mod:`spothop.observe.reconcile`.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select

from spothop.db import dialect_insert
from spothop.errors import SpothopError
from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.market.interruptions import InterruptionStore
from spothop.observe.billing import Charge, charge, known_price
from spothop.observe.ledger_record import LedgerRecord, record_from_row, record_row
from spothop.observe.rates import (
    RATE_CLOUD,
    RATE_OBSERVED,
    RATE_PLACED,
    SOURCE_OBSERVED,
    charge_of_lines,
    cloud_lines,
    mean_line_price,
    observed_price,
    price_over,
    record_observed_prices,
)
from spothop.observe.reconcile import ReconcileLine, Reconciliation, bill_sources, reconcile
from spothop.providers.base import BillingRule, Instance, InstanceState, Provider
from spothop.resources.market_id import MarketId
from spothop.state.job_tables import job_attempts
from spothop.state.ledger_tables import ledger_records
from spothop.state.market_tables import exposure

__all__ = [
    "CLOCK_PROVIDER",
    "CLOCK_STORE",
    "CURRENCY",
    "RATE_CLOUD",
    "RATE_OBSERVED",
    "RATE_PLACED",
    "SOURCE_OBSERVED",
    "UNKNOWN_RULE",
    "Ledger",
    "LedgerRecord",
    "ReconcileLine",
    "Reconciliation",
    "close_attempt",
    "close_books",
    "close_ended",
    "price_over",
    "reconcile",
    "record_observed_prices",
    "record_run",
    "total_microusd",
]

log = logging.getLogger(__name__)

CURRENCY = "USD"
CLOCK_PROVIDER = "provider"
CLOCK_STORE = "store"
UNKNOWN_RULE = BillingRule(source="unknown: the provider was not available")
_RUNNING = (InstanceState.RUNNING, InstanceState.NOTICED)


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
        rows = {r.attempt_id: record_row(r, now) for r in fresh}  # one row per key (the last given)
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
            lines = cloud_lines(provider, rule, attempt, instance, start, start + usage_s)
            if lines is not None:
                billed = charge_of_lines(usage_s, lines)
                price, rate_source = mean_line_price(lines), RATE_CLOUD
            elif price is not None:
                observed = observed_price(self.store, attempt, rule, price, start, start + usage_s)
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
            return [record_from_row(dict(r._mapping)) for r in conn.execute(query)]

    def reconcile(self, job_id: str | None = None) -> Reconciliation:
        """The stored records against what each provider billed (update first for fresh figures);
        a provider without a bill source is listed, not reconciled."""
        return reconcile(self.records(job_id), bill_sources(self.providers))


def close_books(store: JobStore, providers: Mapping[str, Provider], observation: Any) -> None:
    """The controller's one hook after each pass's actions: prices observed, then :func:`close_ended`."""
    if observation is not None:
        record_observed_prices(store, observation)
    close_ended(store, providers)


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
