"""The local provider family: simulated clouds whose instances are real processes.

Each cloud of the world (:mod:`.world`) is one :class:`LocalProvider`,
registered under its own name (``aws-sim``, ``gcp-sim``, …). A launch writes
the instance's directory and record and starts its host process (:mod:`.boot`;
the host is :mod:`.host`), which serves the metadata endpoint, runs the
bootstrap command in its own process group, bills it, and plays the market's
preemptions on it. A stored record reads as an instance by :mod:`.rows`.

Contract notes beyond :class:`~spothop.providers.base.Provider`:

- A spot launch into a market the trace or generator says is unavailable
  right now fails with :class:`~spothop.errors.CapacityUnavailable`, carrying
  the error code the imitated cloud uses for it.
- A spot launch with a maximum price below the market's current price fails
  with :class:`~spothop.errors.PriceTooLow`.
- ``launch`` returns once the host is serving the metadata endpoint (the
  instance is ``pending`` until its launch delay has passed).
- A launch with ``reservation`` goes into that reserved pool of the world file
  (:mod:`spothop.providers.reservations`): an on-demand instance (never
  preempted: the market's drops and ``preempt`` leave it alone) billed at the
  pool's ``price_usd_per_hour``; ``CapacityUnavailable`` once ``count`` of
  them are alive; ``InvalidRequest`` for an unknown pool, naming it.
- ``terminate`` of an unknown or ended instance returns silently.
- An instance runs the boot script the provider renders for it in its
  cloud's shape (:mod:`.userdata`), isolated from this machine but for the
  world's image and buckets (:mod:`.isolation`; the world's ``isolation:``).
  A launch the boot script cannot carry (a credential in its env) fails with
  ConfigError before anything starts; ``isolation: required`` where the
  machine cannot isolate fails with ProviderError naming why.
- :meth:`LocalProvider.console_output` is the instance's console (the boot
  script's output and the agent unit's); :meth:`LocalProvider.bucket_paths`
  the world's buckets (:class:`~spothop.providers.extensions.SharedStorage`).
- :meth:`LocalProvider.preempt` injects an interruption notice with a chosen
  lead time, as the market would; only into spot instances, as on the real clouds.
- :meth:`LocalProvider.schedule_maintenance` schedules a maintenance event
  (see :mod:`.maintenance`); :meth:`LocalProvider.cancel_maintenance` cancels it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spothop.errors import (
    CapacityUnavailable,
    ConfigError,
    InstanceNotFound,
    InvalidRequest,
    PriceTooLow,
    ProviderError,
)
from spothop.market import Clock, SpotMarket
from spothop.providers.base import (
    BOOT_DEADLINE_S,
    Capabilities,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    SpotPrice,
)
from spothop.providers.billing import (
    SpotPriceHistory,
)
from spothop.providers.extensions import ClockKeeper
from spothop.providers.local import isolation, maintenance, userdata
from spothop.providers.local.boot import NewInstance, start_host
from spothop.providers.local.lost import reap
from spothop.providers.local.metadata import PROTOCOLS, UNREACHABLE_URL, ScheduledEvent
from spothop.providers.local.metadata.codes import ErrorCodes
from spothop.providers.local.processes import kill_process
from spothop.providers.local.rows import instance_of, preempt_lead_s
from spothop.providers.local.runtime import (
    cloud_clock,
    market_drop,
    market_start,
    read_clock,
    spot_market,
    stored_market_start,
)
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import World, load_world
from spothop.providers.local.world_spec import CloudSpec
from spothop.providers.reservations import Reservation, ReservedCapacity, check_reserved_request
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering

# Its instances' cost_microusd: the instance hosts' billing lines (providers/billing.py), kept in the
# cloud's own store whether or not the controller was alive.
LOCAL_BILL_SOURCE = "the local cloud's billing records"


class LocalProvider(Provider, ReservedCapacity, SpotPriceHistory, ClockKeeper):
    """One simulated cloud of a world. See the module docstring for its rules."""

    shares_host_network = True  # its instances reach a loopback control plane (SharesHostNetwork)

    def __init__(
        self,
        name: str,
        world: World | None = None,
        world_path: Path | None = None,
        store: CloudStore | None = None,
        clock: Clock | None = None,
    ) -> None:
        """``clock`` overrides the cloud's shared clock for this provider's own
        decisions (launch refusals, spot prices); tests use a manual clock to hit
        exact trace ticks. Instance hosts always run on the shared clock."""
        self._clock_override = clock
        self.world_path = world_path
        self.world = world or load_world(world_path)
        self.spec: CloudSpec = self.world.cloud(name)
        self.name = name
        # The imitated cloud's own error codes and id shape, beside its metadata protocol.
        self.codes: ErrorCodes = PROTOCOLS[self.spec.protocol].ERROR_CODES
        self._instance_ids = PROTOCOLS[self.spec.protocol].INSTANCE_IDS
        self.store = store or CloudStore()
        self.capabilities = Capabilities(
            spot=True,
            on_demand=True,
            notice_lead_time_s=self.spec.notice_lead_time_s,
            advance_notice=self.spec.advance_notice_s is not None,
            notice_protocol=self.spec.protocol,
            per_zone_spot_prices=True,
            max_price_bids=True,
            billing=PROTOCOLS[self.spec.protocol].BILLING,
            typical_boot_s=self.spec.launch_delay_s,
            # Its own clock's: the controller reads it over the world's speed (and gives the boot
            # script's install, wall time on this machine, a floor of its own).
            boot_deadline_s=self.spec.launch_delay_s + BOOT_DEADLINE_S,
            bill_source=LOCAL_BILL_SOURCE,
        )
        # Built without writing: a provider that only shows prices leaves the shared anchor alone.
        self._market_start_s = market_start(self.store, anchor=False)
        self._market = self._own_market()

    def _own_market(self) -> SpotMarket:
        return spot_market(
            self.store,
            self.world,
            [k for k in self.world.market_sources if k.provider == self.name],
            start_s=self._market_start_s,
        )

    @property
    def clock(self) -> Clock:
        """The shared clock, read without writing (see :mod:`.runtime`); a launch anchors it."""
        return self._clock_override or read_clock(self.store, self.world)

    def _anchor(self) -> None:
        """Anchor the shared clock and market start (a launch runs the cloud; display never does)."""
        cloud_clock(self.store, self.world, market_start_s=self._market_start_s)
        stored = market_start(self.store)
        if (
            stored != self._market_start_s
        ):  # another process anchored first: its market is the cloud's
            self._market_start_s = stored
            self._market = self._own_market()

    # -- catalog and market -------------------------------------------------

    def list_offerings(self) -> list[Offering]:
        return list(self.world.offerings[self.name])

    def spot_prices(
        self, instance_types: Sequence[str] | None = None, at: float | None = None
    ) -> list[SpotPrice]:
        t = self.clock.now() if at is None else at
        out = []
        for o in self.world.offerings[self.name]:
            if instance_types and o.instance_type not in instance_types:
                continue
            key = self.world.market_key(self.name, o)
            out.append(
                SpotPrice(
                    provider=self.name,
                    region=o.region,
                    zone=o.zone,
                    instance_type=o.instance_type,
                    price_usd_per_hour=self._market.price_usd_per_hour(key, t),
                    timestamp=t,
                    available=self._market.is_available(key, t),
                )
            )
        return out

    def spot_price_steps(
        self, region: str, zone: str | None, instance_type: str, start_s: float, end_s: float
    ) -> list[tuple[float, float]]:
        """The market's price path, as the instance hosts bill it (the same :class:`SpotMarket`
        on the cloud's stored market start: :mod:`spothop.providers.billing`)."""
        market = self._stored_market()
        offering = self.world.offering(self.name, zone or region, instance_type)
        if offering is None:
            raise InvalidRequest(
                self.name,
                self.codes.invalid_parameter,
                f"no market {instance_type} in {zone or region} on {self.name}",
            )
        return market.price_steps(self.world.market_key(self.name, offering), start_s, end_s)

    def _stored_market(self) -> SpotMarket:
        """The market on the cloud's stored start, as the instance hosts play it."""
        stored = stored_market_start(self.store)
        if stored is not None and stored != self._market_start_s:
            # Another process anchored the cloud after this provider was made: its market is the truth.
            self._market_start_s = stored
            self._market = self._own_market()
        return self._market

    def forecast_notice(self, instance_id: str) -> float | None:
        """When the market gives this instance its final interruption notice, in simulated unix
        seconds: the notice it already has, else its market's next drop less the cloud's lead
        time (not before now: a drop sooner than the lead is noticed at once). None for an
        on-demand or ended instance, and for one whose market never drops again.

        The local cloud knows its own future (its markets are seeded traces): tests and demos
        use this to act just before a preemption the market, not the caller, brings.
        """
        row = self._reap(self._own_row(instance_id))
        if row["notice_time"] is not None:
            return float(row["notice_time"])
        if not row["spot"] or not InstanceState(row["state"]).is_alive:
            return None
        # The host's own key for its market (.host), so the forecast is what the host will play.
        key = MarketId.of(self.name, row["region"], row["zone"], row["instance_type"])
        now = self.clock.now()
        drop = market_drop(self._stored_market(), key, now)
        return None if drop is None else max(now, drop - self.spec.notice_lead_time_s)

    # -- launch -------------------------------------------------------------

    def list_reservations(self) -> list[Reservation]:
        """The cloud's reserved pools (the world file's ``reserved:``), with their live instances counted."""
        in_use: dict[str, int] = {}
        for row in self.store.all_instances(self.name):
            if row.get("reservation") and InstanceState(self._reap(row)["state"]).is_alive:
                in_use[row["reservation"]] = in_use.get(row["reservation"], 0) + 1
        return [
            Reservation(
                reservation_id=pool.reservation_id,
                provider=self.name,
                region=offering.region,
                zone=offering.zone,
                instance_type=pool.instance_type,
                count=pool.count,
                price_usd_per_hour=pool.price_usd_per_hour,
                in_use=in_use.get(pool.reservation_id, 0),
            )
            for pool, offering in self.world.reserved_pools(self.name)
        ]

    def launch(self, request: LaunchRequest) -> Instance:
        if request.image is not None:  # checked first: nothing here can run a container
            # InvalidRequest: it fails every launch here alike, so the job stops trying this
            # cloud (launch_refused) and fails with this message, instead of relaunching forever.
            raise InvalidRequest(
                self.name,
                self.codes.invalid_parameter,
                f"image {request.image!r}: the local cloud has no container runtime",
                "remove the job's 'image:' option to run here, or launch on a real cloud",
            )
        userdata.check(request)  # a boot script it cannot carry is refused before anything runs
        if request.reservation is not None:
            # Checked before anything else: a reserved launch names its pool, and the pool its place.
            pool = check_reserved_request(
                self.name, self.codes.invalid_parameter, request, self.list_reservations()
            )
            offering = self._offering_for(request)
            self._anchor()
            return self._start(request, offering, pool.price_usd_per_hour, self.clock.now(), pool)
        offering = self._offering_for(request)
        self._anchor()
        key = self.world.market_key(self.name, offering)
        now = self.clock.now()
        if request.spot:
            self._check_spot(request, key, now)
            price = self._market.price_usd_per_hour(key, now)
        else:
            if offering.on_demand_price_usd_per_hour is None:
                raise InvalidRequest(
                    self.name,
                    self.codes.invalid_parameter,
                    f"{offering.instance_type} has no on-demand market",
                )
            price = offering.on_demand_price_usd_per_hour
        return self._start(request, offering, price, now, None)

    def _start(
        self,
        request: LaunchRequest,
        offering: Offering,
        price: float,
        now: float,
        pool: Reservation | None,
    ) -> Instance:
        """Record the instance and start its host; a reserved one only while its pool has a free slot."""
        instance_id = self._instance_ids.new()
        directory = self.store.instances_dir / instance_id
        directory.mkdir(parents=True)
        new = NewInstance(
            instance_id=instance_id,
            cloud=self.spec,
            request=request,
            offering=offering,
            price_usd_per_hour=price,
            launched_at=now,
            reservation=pool.reservation_id if pool else None,
        )
        host_spec = new.host_spec(
            self.world_path,
            self.store.root,
            isolated=self._isolated(),
            image_paths=self.world.image_paths,
            buckets=self.world.buckets,
        )
        spec_file = directory / "instance.json"
        spec_file.write_text(json.dumps(host_spec, indent=2))
        spec_file.chmod(0o600)  # it holds the agent's environment
        (directory / ROOT_VOLUME_FILE).write_text(json.dumps(root_volume(request), indent=2))
        added = self.store.add_instance(new.row(directory), capacity=pool.count if pool else None)
        if not added:
            assert pool is not None  # only a reserved launch has a capacity to be refused by
            shutil.rmtree(directory, ignore_errors=True)
            raise CapacityUnavailable(
                self.name,
                self.codes.capacity_unavailable,
                f"reservation {pool.reservation_id!r} is full: its {pool.count} instance(s) of "
                f"{pool.instance_type} in {offering.location} all run",
            )
        start_host(self.store, instance_id, directory, self.name, self.codes)
        self._write_user_data(instance_id, directory, request)
        return self.describe(instance_id)

    def root_volume(self, instance_id: str) -> dict[str, Any]:
        """The root volume and machine image the instance's launch asked for, as recorded
        (:func:`root_volume`): the local cloud's hosts share this machine's disk, so it is
        kept, not made."""
        row = self._own_row(instance_id)
        recorded: dict[str, Any] = json.loads(
            (Path(row["directory"]) / ROOT_VOLUME_FILE).read_text()
        )
        return recorded

    def _isolated(self) -> bool:
        """Whether this launch runs isolated (:mod:`.isolation`); ProviderError where required and unavailable."""
        mode = isolation.mode_of(self.world.isolation)
        if mode == "off":
            return False
        reason = isolation.unavailable()
        if reason is None:
            return True
        if mode == "required":
            raise ProviderError(
                self.name,
                self.codes.invalid_parameter,
                f"the world requires isolated instances and this machine cannot isolate: {reason}",
                "run where unshare works (Linux, user namespaces on), or set 'isolation: auto' "
                "in the world file",
            )
        isolation.warn_unisolated(reason)
        return False

    def _write_user_data(self, instance_id: str, directory: Path, request: LaunchRequest) -> None:
        """Render the boot script with the metadata URL the host serves, and hand it to the host."""
        row = self.store.instance(instance_id) or {}
        down = self.spec.metadata_options.get("endpoint") == "down"
        url = UNREACHABLE_URL if down else str(row.get("metadata_url"))
        try:
            text = userdata.render(request, self.spec.protocol, url, instance_id)
        except ConfigError:
            self.terminate(instance_id)
            raise
        staged = directory / f"{isolation.USER_DATA}.part"
        staged.write_text(text)
        staged.chmod(0o600)  # it holds the agent's token
        staged.replace(directory / isolation.USER_DATA)  # the host sees it whole or not at all

    def console_output(self, instance_id: str) -> str:
        """The instance's console: its boot script's output and its agent unit's (EC2's GetConsoleOutput)."""
        row = self._own_row(instance_id)
        return isolation.console_text(Path(row["directory"]))

    def bucket_paths(self) -> Sequence[Path]:
        """The world's buckets: folders every instance of this cloud sees at the same path."""
        return self.world.buckets

    def _offering_for(self, request: LaunchRequest) -> Offering:
        location = request.zone or request.region
        offering = self.world.offering(self.name, location, request.instance_type)
        if offering is None or (request.zone is None and offering.region != request.region):
            sold = sorted(
                {f"{o.instance_type} in {o.location}" for o in self.world.offerings[self.name]}
            )
            raise InvalidRequest(
                self.name,
                self.codes.invalid_parameter,
                f"{request.instance_type} is not offered in {location}",
                hint=f"{self.name} sells: {'; '.join(sold)}",
            )
        return offering

    def _check_spot(self, request: LaunchRequest, key: Any, now: float) -> None:
        if not self._market.is_available(key, now):
            raise CapacityUnavailable(
                self.name,
                self.codes.capacity_unavailable,
                # a regional cloud's offerings have no zone: its region is where
                f"no spot capacity for {key.instance_type} in {request.zone or request.region} "
                "right now",
            )
        price = self._market.price_usd_per_hour(key, now)
        if request.max_price_usd_per_hour is not None and request.max_price_usd_per_hour < price:
            raise PriceTooLow(
                self.name,
                self.codes.bid_refused,
                f"max price {request.max_price_usd_per_hour:.4f} is below the spot price {price:.4f} USD/h",
            )

    # -- describe, list, terminate, preempt -------------------------------------

    def _own_row(self, instance_id: str) -> dict[str, Any]:
        """This cloud's stored row of the instance; InstanceNotFound with the cloud's own code."""
        row = self.store.instance(instance_id)
        if row is None or row["cloud"] != self.name:
            raise InstanceNotFound(
                self.name, self.codes.instance_not_found, f"no instance {instance_id!r}"
            )
        return row

    def describe(self, instance_id: str) -> Instance:
        return self._instance(self._reap(self._own_row(instance_id)))

    def list_instances(self) -> list[Instance]:
        return [self._instance(self._reap(r)) for r in self.store.all_instances(self.name)]

    def terminate(self, instance_id: str) -> None:
        row = self.store.instance(instance_id)
        if row is None or row["cloud"] != self.name or not InstanceState(row["state"]).is_alive:
            return
        self.store.update_instance(instance_id, terminate_requested=True)
        if row["host_pid"]:
            kill_process(row["host_pid"], signal.SIGTERM)

    def preempt(
        self, instance_id: str, lead_time_s: float | None = None, advance_s: float | None = None
    ) -> Instance:
        """Inject an interruption: notice now, reclaim after ``lead_time_s`` (default: the cloud's lead).

        With ``advance_s`` the cloud's advance signal (AWS's rebalance
        recommendation) comes now, the final notice ``advance_s`` later, and the
        reclaim ``lead_time_s`` after that — as a market-driven preemption does.
        ConfigError for a cloud that gives no advance signal, and for an on-demand
        instance (clouds reclaim spot capacity only; no notice would reach its agent).
        """
        row = self._own_row(instance_id)
        lead = preempt_lead_s(instance_id, row, self.spec, lead_time_s, advance_s)
        self.store.update_instance(instance_id, preempt_lead_s=lead, preempt_advance_s=advance_s)
        return self.describe(instance_id)

    def schedule_maintenance(
        self,
        instance_id: str,
        code: str,
        in_s: float,
        window_s: float = maintenance.DEFAULT_WINDOW_S,
        description: str = "",
    ) -> ScheduledEvent:
        """Schedule a maintenance event ``code`` from ``in_s`` seconds from now (the cloud's clock) for ``window_s``.

        Its metadata endpoint shows it within a host tick. ConfigError for a
        code the cloud's protocol does not serve, a negative time, or an
        instance that has ended; InstanceNotFound for an unknown id.
        """
        row = self._live_row(instance_id, "get a scheduled event")
        if in_s < 0:
            raise ConfigError(f"--in must be ≥ 0 seconds, got {in_s}")
        event = maintenance.new_event(
            self.spec.protocol, code, self.clock.now() + in_s, window_s, description
        )
        self.store.update_instance(
            instance_id, scheduled_events=maintenance.encode([*maintenance.events_of(row), event])
        )
        return event

    def cancel_maintenance(
        self, instance_id: str, event_id: str | None = None
    ) -> list[ScheduledEvent]:
        """Cancel the instance's active event ``event_id`` (None: all of them); return its events."""
        row = self._live_row(instance_id, "have its scheduled events canceled")
        events = maintenance.cancel(maintenance.events_of(row), event_id)
        self.store.update_instance(instance_id, scheduled_events=maintenance.encode(events))
        return events

    def maintenance_events(self, instance_id: str) -> list[ScheduledEvent]:
        """Every scheduled event of the instance, past ones included; InstanceNotFound for an unknown id."""
        row = self.store.instance(instance_id)
        if row is None or row["cloud"] != self.name:
            raise InstanceNotFound(
                self.name, "InvalidInstanceID.NotFound", f"no instance {instance_id!r}"
            )
        return maintenance.events_of(row)

    def _live_row(self, instance_id: str, what: str) -> dict[str, Any]:
        row = self.store.instance(instance_id)
        if row is None or row["cloud"] != self.name:
            raise InstanceNotFound(
                self.name, "InvalidInstanceID.NotFound", f"no instance {instance_id!r}"
            )
        if not InstanceState(row["state"]).is_alive:
            raise ConfigError(
                f"instance {instance_id} is {row['state']}; only a live instance can {what}"
            )
        return row

    def _reap(self, row: dict[str, Any]) -> dict[str, Any]:
        """A live instance whose host died, or never started, failed and billed to its end
        (:func:`.lost.reap`)."""
        return reap(
            self.store, row, self.clock.now, self.capabilities.billing, self.spot_price_steps
        )

    def _instance(self, row: dict[str, Any]) -> Instance:
        return instance_of(self.name, row)

    def wait(self, instance_id: str, states: Sequence[InstanceState], timeout_s: float) -> Instance:
        """Poll until the instance reaches one of ``states`` or ``timeout_s`` (wall) passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            instance = self.describe(instance_id)
            if instance.state in states or time.monotonic() >= deadline:
                return instance
            time.sleep(0.05)


def _world_path_from_env() -> Path | None:
    value = os.environ.get("SPOTHOP_WORLD")
    return Path(value) if value else None


class LocalFamily:
    """The registry's family for the local cloud: every cloud of the world, by its own name.

    ``local`` names the world's first cloud. ``world_path`` (else
    ``$SPOTHOP_WORLD``, else the built-in world) chooses the world.
    """

    def names(self, world_path: Path | None = None, **_: Any) -> list[str]:
        return load_world(world_path or _world_path_from_env()).cloud_names

    def create(self, name: str, world_path: Path | None = None, **_: Any) -> LocalProvider:
        path = world_path or _world_path_from_env()
        world = load_world(path)
        return LocalProvider(
            world.cloud_names[0] if name == "local" else name, world=world, world_path=path
        )


LOCAL_FAMILY = LocalFamily()


ROOT_VOLUME_FILE = "root_volume.json"  # in the instance's folder: what its launch asked for


def root_volume(request: LaunchRequest) -> dict[str, Any]:
    """The root volume (size GiB, tier) and machine image a launch asked for; None where the
    request leaves them to the cloud."""
    disk = request.disk
    return {
        "size_gib": disk.size_gib if disk else None,
        "tier": str(disk.tier) if disk and disk.tier else None,
        "image_id": request.image_id,
    }
