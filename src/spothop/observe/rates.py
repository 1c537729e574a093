"""Which rate an attempt is charged at: the placement price, the prices observed, or the cloud's own.

The ledger's contract (:mod:`spothop.observe.ledger`, rule 7) says how a spot
attempt is priced; this module finds the price:

1. **The cloud's own history** (``rate_source`` :data:`RATE_CLOUD`): a cloud
   that keeps one (:class:`~spothop.providers.billing.SpotPriceHistory`) is
   billed line by line as :mod:`spothop.providers.billing` bills
   (:func:`cloud_lines`; :func:`charge_of_lines` sums them,
   :func:`mean_line_price` is the price the record shows). None when the cloud
   keeps none or cannot say now (an error is logged): the next rule stands in.
2. **The prices the controller observed** (:data:`RATE_OBSERVED`): each pass
   stores the spot price of every market a live spot attempt runs in
   (:func:`record_observed_prices`, source :data:`SOURCE_OBSERVED` in the price
   history, only the changes; never raises); :func:`observed_price` is their
   time-weighted mean over the run (:func:`price_over`), None when none moved
   the price off the placement price.
3. **The placement price** (:data:`RATE_PLACED`) otherwise.

The price history is opened once per database engine (:func:`price_history`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from spothop.errors import SpothopError
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_store import PriceStore
from spothop.observe.billing import Charge
from spothop.providers.base import BillingRule, Instance, Provider
from spothop.providers.billing import (
    BillingLine,
    SpotPriceHistory,
    billed_price_steps,
    billing_lines,
)
from spothop.resources.market_id import MarketId

log = logging.getLogger(
    "spothop.observe.ledger"
)  # the ledger's log: one name to watch for its books

RATE_PLACED = "placement"  # the price the controller placed the attempt at (the cloud's quote)
RATE_OBSERVED = "observed"  # the mean of the spot prices the controller saw over the run
RATE_CLOUD = "cloud"  # the cloud's own price history, billed line by line as the cloud bills
SOURCE_OBSERVED = "controller"  # price_store source of the controller's observed prices


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


def cloud_lines(
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


def charge_of_lines(usage_s: float, lines: Sequence[BillingLine]) -> Charge:
    """``usage_s`` of running time billed as ``lines`` say: their seconds and micro-dollars summed."""
    return Charge(
        usage_s, sum(line.billed_s for line in lines), sum(line.cost_microusd for line in lines)
    )


def mean_line_price(lines: Sequence[BillingLine]) -> float:
    """The lines' price weighted by their billed seconds (the one price when they share it)."""
    prices = {line.price_usd_per_hour for line in lines}
    billed = sum(line.billed_s for line in lines)
    if len(prices) == 1 or billed <= 0:
        return lines[0].price_usd_per_hour
    return sum(line.price_usd_per_hour * line.billed_s for line in lines) / billed


def observed_price(
    store: JobStore,
    attempt: AttemptRecord,
    rule: BillingRule,
    placed: float,
    start: float,
    end: float,
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
        for p in price_history(store).points(
            series=PriceSeriesKey(market, True, ""),
            since=datetime.fromtimestamp(since, tz=UTC),
            until=datetime.fromtimestamp(end, tz=UTC),
        )
        if p.source == SOURCE_OBSERVED
    ]
    return price_over(points, placed, start, end)


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
        return price_history(store).record_prices(points, source=SOURCE_OBSERVED).added
    except Exception as exc:
        log.warning("observed spot prices not recorded: %s", exc)
        return 0


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


def price_history(store: JobStore) -> PriceStore:
    """The price history on the job store's database (opened once per engine)."""
    key = id(store.engine)
    if key not in _PRICE_STORES:
        _PRICE_STORES[key] = PriceStore(engine=store.engine)
    return _PRICE_STORES[key]
