"""A provider in memory, on an injectable clock, for the controller's tests and users' own.

:class:`FakeProvider` keeps the :class:`~spothop.providers.base.Provider`
contracts (the conformance suite in ``tests/providers`` runs on it as on the
local cloud) with no process, no port and no file: instances are records,
time is whatever ``clock.now()`` says, and what a real cloud does on its own —
refuse a launch, run out of quota, give a notice, take an instance back — is
scripted by the test.

Rules beyond the Provider contract:

- An instance is ``pending`` for ``launch_delay_s`` of clock time, then
  ``running``; billing runs from then until it ends, per second, in integer
  micro-dollars: on-demand at the offering's price, spot at the market's price
  step by step (:class:`~spothop.providers.fake.market.FakeMarket`).
- A spot launch fails with :class:`~spothop.errors.CapacityUnavailable` when
  its market is unavailable or full (``capacity``), with
  :class:`~spothop.errors.PriceTooLow` when its maximum price is under the
  market's; a launch that would take the alive instances of its kind (spot or
  on-demand) over ``gpu_quota`` GPUs fails with :class:`~spothop.errors.QuotaExceeded`.
  Every error carries the code from :data:`FAKE_ERROR_CODES` (or the one
  scripted), so tests can check that codes survive.
- :meth:`FakeProvider.fail_next` scripts the next launches' errors (any
  ProviderError, optionally only for one instance type, zone or market kind);
  scripted errors are used in order, once each, before any other check.
- :meth:`FakeProvider.preempt` gives an interruption notice (optionally an
  advance notice first, and at a later time): the instance is ``noticed``
  from the notice on and ``preempted`` at its termination time, as the clock
  passes them. :meth:`FakeProvider.fail` ends one as ``failed`` at once.
- ``reservations`` are reserved pools
  (:class:`~spothop.providers.reservations.Reservation`, ``in_use`` ignored):
  a launch with ``reservation`` set goes into one, not spot, billed at its
  rate, never preempted (``preempt`` refuses it), ``CapacityUnavailable``
  once ``count`` are alive; an unknown id is an ``InvalidRequest`` naming it.
- ``requests`` records every launch request, in order, refused or not.
- ``bucket_paths`` (:class:`~spothop.providers.extensions.SharedStorage`): the
  folders a test says every instance sees at the same path (default: none, as
  on a real cloud); a job's plain checkpoint or output path must lie in one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spothop.errors import (
    CapacityUnavailable,
    ConfigError,
    InstanceNotFound,
    InvalidRequest,
    PriceTooLow,
    ProviderError,
    QuotaExceeded,
)
from spothop.market import Clock, ManualClock
from spothop.providers.base import (
    Capabilities,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    SpotPrice,
)
from spothop.providers.extensions import ClockKeeper
from spothop.providers.fake.factories import make_markets
from spothop.providers.fake.market import FakeMarket, fixed_cost_microusd
from spothop.providers.local.metadata.codes import HEX_DIGITS, ErrorCodes, InstanceIdShape
from spothop.providers.reservations import Reservation, ReservedCapacity, check_reserved_request
from spothop.resources.offering import Offering

FAKE_NAME = "fake"
FAKE_NOTICE_LEAD_TIME_S = (
    120.0  # the fake's default final-notice lead (any documented value would do)
)
FAKE_LAUNCH_DELAY_S = 30.0  # clock seconds from launch to running
# Its instances' cost_microusd: the fake's own records of each run at its market's prices.
FAKE_BILL_SOURCE = "the fake provider's own records"

FAKE_ERROR_CODES = ErrorCodes(
    capacity_unavailable="FakeCapacityUnavailable",
    instance_not_found="FakeInstanceNotFound",
    invalid_parameter="FakeInvalidParameter",
    internal_error="FakeInternalError",
    price_too_low="FakeMaxPriceTooLow",
)
FAKE_QUOTA_EXCEEDED = "FakeQuotaExceeded"
FAKE_INSTANCE_IDS = InstanceIdShape(prefix="fake-", alphabet=HEX_DIGITS, length=12)


@dataclass(frozen=True)
class _Scripted:
    error: ProviderError
    instance_type: str | None
    zone: str | None
    spot: bool | None

    def applies(self, request: LaunchRequest, zone: str | None) -> bool:
        return (
            (self.instance_type is None or self.instance_type == request.instance_type)
            and (self.zone is None or self.zone == zone)
            and (self.spot is None or self.spot == request.spot)
        )


@dataclass
class _Record:
    instance: Instance  # as launched; state and billing are derived from the clock
    market: FakeMarket
    running_at: float
    advance_notice_time: float | None = None
    ended: InstanceState | None = None  # terminated or failed by a call
    reservation: str | None = None  # the reserved pool it holds a slot of


class FakeProvider(Provider, ReservedCapacity, ClockKeeper):
    """An in-memory cloud; see the module docstring for its rules.

    ``markets`` are the offerings it sells with their spot state (see
    :func:`spothop.testing.make_market`; default: :func:`spothop.testing.make_markets`
    for this name). ``clock`` is any object with ``now()`` (default: a
    :class:`~spothop.market.ManualClock` at 0, which tests advance).
    ``gpu_quota`` maps ``"spot"`` / ``"on_demand"`` to the GPUs that may be
    alive at once in that kind of market (absent: no limit). ``reservations``:
    the reserved pools it holds (each of an offering it sells).
    """

    shares_host_network = True  # an in-memory cloud on this host (extensions.SharesHostNetwork)
    runs_nothing = True  # its instances are records: no process opens a control plane (RunsNothing)

    def __init__(
        self,
        name: str = FAKE_NAME,
        markets: Iterable[FakeMarket] | None = None,
        clock: Clock | None = None,
        *,
        notice_lead_time_s: float = FAKE_NOTICE_LEAD_TIME_S,
        advance_notice: bool = True,
        launch_delay_s: float = FAKE_LAUNCH_DELAY_S,
        gpu_quota: Mapping[str, int] | None = None,
        codes: ErrorCodes = FAKE_ERROR_CODES,
        reservations: Iterable[Reservation] = (),
        bucket_paths: Iterable[Path | str] = (),
    ) -> None:
        self.name = name
        self._buckets = tuple(Path(b).absolute() for b in bucket_paths)
        self.clock: Clock = clock or ManualClock()
        self.codes = codes
        self.launch_delay_s = launch_delay_s
        self.gpu_quota = dict(gpu_quota or {})
        unknown = sorted(set(self.gpu_quota) - {"spot", "on_demand"})
        if unknown:
            raise ConfigError(
                f"gpu_quota takes the keys 'spot' and 'on_demand', not {', '.join(unknown)}"
            )
        self.markets = list(markets) if markets is not None else make_markets(provider=name)
        for market in self.markets:
            if market.offering.provider != name:
                raise ConfigError(
                    f"market {market.offering.instance_type} in {market.offering.location} belongs to "
                    f"{market.offering.provider!r}, not {name!r}; make it with provider={name!r}"
                )
        self.capabilities = Capabilities(
            spot=any(m.has_spot for m in self.markets),
            on_demand=any(m.offering.on_demand_price_usd_per_hour for m in self.markets),
            notice_lead_time_s=notice_lead_time_s,
            advance_notice=advance_notice,
            notice_protocol=None,  # no metadata endpoint: notices are read through describe()
            per_zone_spot_prices=True,
            max_price_bids=True,
            typical_boot_s=launch_delay_s,
            bill_source=FAKE_BILL_SOURCE,
        )
        self.reservations = [replace(r, in_use=0) for r in reservations]
        for pool in self.reservations:
            sold = any(
                m.offering.instance_type == pool.instance_type
                and m.offering.region == pool.region
                and m.offering.zone == pool.zone
                for m in self.markets
            )
            if pool.provider != name or not sold:
                raise ConfigError(
                    f"reservation {pool.reservation_id!r} ({pool.provider}: {pool.instance_type} in "
                    f"{pool.zone or pool.region}) is not of an offering {name!r} sells"
                )
        self.requests: list[LaunchRequest] = []
        self._scripted: list[_Scripted] = []
        self._records: dict[str, _Record] = {}
        self._lock = threading.RLock()

    def bucket_paths(self) -> Sequence[Path]:
        """The folders this fake's instances share with the controller (``SharedStorage``)."""
        return self._buckets

    # -- catalog and market -------------------------------------------------

    def list_offerings(self) -> list[Offering]:
        return [m.offering for m in self.markets]

    def spot_prices(self, instance_types: Sequence[str] | None = None) -> list[SpotPrice]:
        now = self.clock.now()
        out = []
        for m in self.markets:
            price = m.price_at(now)
            if price is None or (instance_types and m.offering.instance_type not in instance_types):
                continue
            o = m.offering
            out.append(
                SpotPrice(
                    provider=self.name,
                    region=o.region,
                    zone=o.zone,
                    instance_type=o.instance_type,
                    price_usd_per_hour=price,
                    timestamp=now,
                    available=m.available and not self._full(m),
                )
            )
        return out

    def market(self, instance_type: str, location: str | None = None) -> FakeMarket:
        """The market of ``instance_type`` in ``location`` (zone or region; None: the only one)."""
        found = [
            m
            for m in self.markets
            if m.offering.instance_type == instance_type
            and location in (None, m.offering.zone, m.offering.region)
        ]
        if len(found) != 1:
            where = f" in {location}" if location else ""
            sold = "; ".join(
                f"{m.offering.instance_type} in {m.offering.location}" for m in self.markets
            )
            raise ConfigError(
                f"{self.name} has {len(found)} markets for {instance_type}{where} (it sells: {sold})"
            )
        return found[0]

    def set_spot_price(
        self, instance_type: str, price_usd_per_hour: float, location: str | None = None
    ) -> None:
        """The market's spot price from now on."""
        self.market(instance_type, location).set_price(price_usd_per_hour, self.clock.now())

    def set_available(
        self, instance_type: str, available: bool, location: str | None = None
    ) -> None:
        """Open or close the market's spot capacity from now on."""
        self.market(instance_type, location).available = available

    # -- scripting ----------------------------------------------------------

    def fail_next(
        self,
        error: ProviderError,
        times: int = 1,
        *,
        instance_type: str | None = None,
        zone: str | None = None,
        spot: bool | None = None,
    ) -> None:
        """The next ``times`` launches that match raise ``error`` (in the order scripted)."""
        if times < 1:
            raise ConfigError(f"fail_next needs times >= 1, got {times}")
        with self._lock:
            self._scripted.extend(_Scripted(error, instance_type, zone, spot) for _ in range(times))

    def capacity_error(self, message: str = "no capacity right now") -> CapacityUnavailable:
        """A CapacityUnavailable with this provider's code, for :meth:`fail_next`."""
        return CapacityUnavailable(self.name, self.codes.capacity_unavailable, message)

    # -- launch -------------------------------------------------------------

    def list_reservations(self) -> list[Reservation]:
        with self._lock:
            alive = self._alive()
            return [
                replace(pool, in_use=sum(1 for r in alive if r.reservation == pool.reservation_id))
                for pool in self.reservations
            ]

    def launch(self, request: LaunchRequest) -> Instance:
        with self._lock:
            self.requests.append(request)
            pool = None
            if request.reservation is not None:
                pool = check_reserved_request(
                    self.name, self.codes.invalid_parameter, request, self.list_reservations()
                )
            market = self._market_for(request)
            zone = market.offering.zone
            for i, scripted in enumerate(self._scripted):
                if scripted.applies(request, zone):
                    del self._scripted[i]
                    raise scripted.error
            now = self.clock.now()
            if pool is not None:
                if pool.in_use >= pool.count:
                    raise CapacityUnavailable(
                        self.name,
                        self.codes.capacity_unavailable,
                        f"reservation {pool.reservation_id!r} is full: {pool.in_use} of {pool.count} in use",
                    )
                price = pool.price_usd_per_hour
            else:
                price = self._check(request, market, now)
                self._check_quota(request, market)
            instance = Instance(
                instance_id=self._new_id(),
                provider=self.name,
                region=market.offering.region,
                zone=zone,
                instance_type=request.instance_type,
                spot=request.spot,
                state=InstanceState.PENDING,
                launched_at=now,
                price_usd_per_hour=price,
                name=request.name,
                tags=dict(request.tags),
                reservation=request.reservation,
            )
            self._records[instance.instance_id] = _Record(
                instance,
                market,
                running_at=now + self.launch_delay_s,
                reservation=request.reservation,
            )
            return self._view(self._records[instance.instance_id], now)

    def _market_for(self, request: LaunchRequest) -> FakeMarket:
        for m in self.markets:
            o = m.offering
            if (
                o.instance_type == request.instance_type
                and o.region == request.region
                and (request.zone is None or request.zone == o.zone)
            ):
                return m
        sold = "; ".join(
            sorted({f"{m.offering.instance_type} in {m.offering.location}" for m in self.markets})
        )
        raise InvalidRequest(
            self.name,
            self.codes.invalid_parameter,
            f"{request.instance_type} is not offered in {request.zone or request.region}",
            hint=f"{self.name} sells: {sold}",
        )

    def _check(self, request: LaunchRequest, market: FakeMarket, now: float) -> float:
        o = market.offering
        if not request.spot:
            if o.on_demand_price_usd_per_hour is None:
                raise InvalidRequest(
                    self.name,
                    self.codes.invalid_parameter,
                    f"{o.instance_type} has no on-demand market",
                )
            return o.on_demand_price_usd_per_hour
        price = market.price_at(now)
        if price is None:
            raise InvalidRequest(
                self.name,
                self.codes.invalid_parameter,
                f"{o.instance_type} in {o.location} has no spot market",
            )
        if not market.available or self._full(market):
            raise CapacityUnavailable(
                self.name,
                self.codes.capacity_unavailable,
                f"no spot capacity for {o.instance_type} in {o.location} right now",
            )
        if request.max_price_usd_per_hour is not None and request.max_price_usd_per_hour < price:
            raise PriceTooLow(
                self.name,
                self.codes.bid_refused,
                f"max price {request.max_price_usd_per_hour:.4f} is below the spot price {price:.4f} USD/h",
            )
        return price

    def _check_quota(self, request: LaunchRequest, market: FakeMarket) -> None:
        kind = "spot" if request.spot else "on_demand"
        quota = self.gpu_quota.get(kind)
        if quota is None:
            return
        used = sum(
            r.market.offering.gpu_count for r in self._alive() if r.instance.spot == request.spot
        )
        if used + market.offering.gpu_count > quota:
            raise QuotaExceeded(
                self.name,
                FAKE_QUOTA_EXCEEDED,
                f"{kind} GPU quota is {quota}; {used} in use, {market.offering.gpu_count} more asked",
            )

    def _full(self, market: FakeMarket) -> bool:
        if market.capacity is None:
            return False
        alive = sum(1 for r in self._alive() if r.market is market and r.instance.spot)
        return alive >= market.capacity

    def _alive(self) -> list[_Record]:
        now = self.clock.now()
        return [r for r in self._records.values() if self._state(r, now).is_alive]

    def _new_id(self) -> str:
        while True:
            instance_id = FAKE_INSTANCE_IDS.new()
            if instance_id not in self._records:
                return instance_id

    # -- describe, list, terminate ------------------------------------------

    def describe(self, instance_id: str) -> Instance:
        with self._lock:
            return self._view(self._record(instance_id), self.clock.now())

    def list_instances(self) -> list[Instance]:
        with self._lock:
            now = self.clock.now()
            return [self._view(r, now) for r in self._records.values()]

    def terminate(self, instance_id: str) -> None:
        self._end(instance_id, InstanceState.TERMINATED)

    def fail(self, instance_id: str) -> Instance:
        """The machine under the instance is gone: it is ``failed`` from now on."""
        self._end(instance_id, InstanceState.FAILED)
        return self.describe(instance_id)

    def _end(self, instance_id: str, state: InstanceState) -> None:
        with self._lock:
            record = self._records.get(instance_id)
            now = self.clock.now()
            if record is None or not self._state(record, now).is_alive:
                return
            record.ended = state
            record.instance = replace(record.instance, ended_at=now)

    # -- notices and preemptions ----------------------------------------------

    def preempt(
        self,
        instance_id: str,
        lead_time_s: float | None = None,
        advance_s: float | None = None,
        at_s: float | None = None,
    ) -> Instance:
        """Script an interruption: the notice at ``at_s`` (default now), reclaim ``lead_time_s`` later.

        With ``advance_s`` the advance notice comes at ``at_s`` and the final
        notice ``advance_s`` after it. ConfigError for an ended instance, a
        negative lead or advance, an advance on a provider without one, or a
        time in the past.
        """
        with self._lock:
            record = self._record(instance_id)
            now = self.clock.now()
            if not self._state(record, now).is_alive:
                raise ConfigError(
                    f"instance {instance_id} is {self._state(record, now).value}; only a live instance can be preempted"
                )
            if record.reservation is not None:
                raise ConfigError(
                    f"instance {instance_id} runs in the reserved pool {record.reservation!r}: "
                    "reserved capacity is never preempted"
                )
            lead = self.capabilities.notice_lead_time_s if lead_time_s is None else lead_time_s
            start = now if at_s is None else at_s
            if lead is None or lead < 0:
                raise ConfigError(f"lead_time_s must be >= 0 seconds, got {lead}")
            if start < now:
                raise ConfigError(f"at_s {start} is in the past (the clock reads {now})")
            if advance_s is not None and (not self.capabilities.advance_notice or advance_s <= 0):
                raise ConfigError(
                    f"advance_s needs a provider with advance notices and a value > 0, got {advance_s}"
                )
            notice = start + (advance_s or 0.0)
            record.advance_notice_time = start if advance_s is not None else None
            record.instance = replace(
                record.instance, notice_time=notice, termination_time=notice + lead
            )
            return self._view(record, now)

    def advance_notice_time(self, instance_id: str) -> float | None:
        """When the advance notice of a scripted interruption comes (None: none scripted)."""
        with self._lock:
            return self._record(instance_id).advance_notice_time

    # -- the view at one instant ----------------------------------------------

    def _record(self, instance_id: str) -> _Record:
        record = self._records.get(instance_id)
        if record is None:
            raise InstanceNotFound(
                self.name, self.codes.instance_not_found, f"no instance {instance_id!r}"
            )
        return record

    def _state(self, record: _Record, now: float) -> InstanceState:
        i = record.instance
        if record.ended is not None:
            return record.ended
        if i.termination_time is not None and now >= i.termination_time:
            return InstanceState.PREEMPTED
        if i.notice_time is not None and now >= i.notice_time:
            return InstanceState.NOTICED
        return InstanceState.RUNNING if now >= record.running_at else InstanceState.PENDING

    def _view(self, record: _Record, now: float) -> Instance:
        i = record.instance
        state = self._state(record, now)
        ended_at = i.ended_at
        if state is InstanceState.PREEMPTED:
            ended_at = i.termination_time
        end = ended_at if ended_at is not None else now
        billed = max(0.0, end - record.running_at)
        if i.spot:
            cost = record.market.spot_cost_microusd(record.running_at, record.running_at + billed)
        else:
            cost = fixed_cost_microusd(i.price_usd_per_hour, billed)
        # A notice scripted for later is not yet visible, as a cloud would not show it.
        visible = i.notice_time is not None and now >= i.notice_time
        return replace(
            i,
            state=state,
            ended_at=ended_at,
            billed_seconds=billed,
            cost_microusd=cost,
            notice_time=i.notice_time if visible else None,
            termination_time=i.termination_time if visible else None,
        )


class FakeFamily:
    """The registry's family for the fake provider: one name, ``fake``, a new provider each time.

    Options: ``clock=``, ``markets=`` and the other keyword arguments of
    :class:`FakeProvider`; options of other families are ignored.
    """

    _OPTIONS = frozenset(
        {
            "markets",
            "clock",
            "notice_lead_time_s",
            "advance_notice",
            "launch_delay_s",
            "gpu_quota",
            "codes",
            "reservations",
        }
    )

    def names(self, **_: Any) -> list[str]:
        return [FAKE_NAME]

    def create(self, name: str, **options: Any) -> FakeProvider:
        if name != FAKE_NAME:
            raise ConfigError(f"the fake family serves only {FAKE_NAME!r}, not {name!r}")
        return FakeProvider(name, **{k: v for k, v in options.items() if k in self._OPTIONS})


FAKE_FAMILY = FakeFamily()
