"""The Compute Engine provider: spothop's provider contract (providers/base.py) over google-cloud-compute.

What each method asks of Compute Engine (REST; every list call follows ``nextPageToken``):

- ``list_offerings``: ``zones.list`` (the zones of each region),
  ``machineTypes.list`` and ``acceleratorTypes.list`` per zone: an offering
  per (type, zone) the zone sells, for the types the built-in catalog has
  (GPU, interconnect and prices from there: the Compute Engine API carries no
  prices, and :meth:`offering_notes` says so).
- ``spot_prices``: the catalog's spot price of each sold market (Spot VM
  prices change at most once a month), ``available`` True.
- ``launch``: ``instances.insert`` with ``scheduling.provisioningModel``
  ``SPOT`` and ``instanceTerminationAction`` ``DELETE`` (on-demand:
  ``STANDARD``), ``onHostMaintenance`` ``TERMINATE`` (GPUs cannot live-migrate),
  ``guestAccelerators`` for an N1 type with GPUs, the startup script of
  :mod:`spothop.providers.gcp.userdata`, labels, and a ``requestId`` made
  from the launch token (a retried insert cannot start a second VM); the
  boot disk from the request's ``image_id`` (else the configured image) and
  ``disk`` (size, and the tier's disk type: :data:`DISK_TYPES`); then
  ``zoneOperations.wait`` until the operation is ``DONE`` and its error, if
  any, mapped (``ZONE_RESOURCE_POOL_EXHAUSTED`` → CapacityUnavailable).
- ``describe`` / ``list_instances`` / ``terminate``: ``instances.get``,
  ``instances.aggregatedList`` filtered on the ``spothop-token`` label (and
  ``id = N`` for an id not seen yet), ``instances.delete`` (idempotent).
- ``console_output`` (:class:`~spothop.providers.extensions.ConsoleOutput`):
  ``instances.getSerialPortOutput`` of serial port 1, where the startup
  script and the agent's unit write (the boot log's tail for a lost agent);
  a VM the provider ended itself, gone from the API, shows an empty console.

Ids are Compute Engine's numeric instance ids. A deleted VM is gone from the
API at once, so the provider keeps what it ended itself (its end time, its
cost) and describes it ``terminated`` from that record; a spot VM the cloud
deleted on preemption reads ``preempted`` while the API still shows it
stopping, and ``InstanceNotFound`` after (a preemption without notice).

Labels on every VM (Compute Engine's rules: lower case, ≤ 63 characters):
the launch's tags made labels (``spothop-job``, ``spothop-node``,
``spothop-token``). The tags as given, the rate at launch and the spothop
instance type are metadata items (``spothop-tags``,
``spothop-price-usd-per-hour``, ``spothop-instance-type``): labels cannot
hold them exactly. ``cost_microusd`` is that rate × the seconds billed
(per second, one minute at least) from ``creationTimestamp``: an estimate;
the bill is Google's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spothop.errors import ConfigError, InstanceNotFound, InvalidRequest, PriceTooLow, ProviderError
from spothop.market.clock import Clock, WallClock
from spothop.providers.base import (
    BOOT_DEADLINE_S,
    Capabilities,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    SpotPrice,
)
from spothop.providers.extensions import ClockKeeper, OfferingNotes
from spothop.providers.gcp import offerings as parse
from spothop.providers.gcp import sdk
from spothop.providers.gcp.body import PRICE_ITEM, TAGS_ITEM, TYPE_ITEM, instance_body
from spothop.providers.gcp.errors import map_error, missing_resource, with_retries
from spothop.providers.local.metadata.gcp import BILLING, ERROR_CODES
from spothop.providers.records import (
    TOKEN_TAG,
    OneNameFamily,
    cost_microusd,
    ended_with_tags,
    iso_seconds,
    launch_tags,
    new_token,
    split_list,
)
from spothop.providers.reservations import refuse_reservation
from spothop.resources.catalog import builtin_offerings
from spothop.resources.offering import Offering

log = logging.getLogger("spothop.providers.gcp")

NAME = "gcp"
DEFAULT_REGIONS = ("us-central1",)
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11"
NOTICE_LEAD_TIME_S = 30.0  # Compute Engine: a preempted VM gets about 30 s (ACPI G2 soft off)
SERIAL_PORT = 1  # the console: where the startup script and the agent's unit write
OPERATION_WAITS = 10  # zoneOperations.wait answers within about 2 minutes; this many at most
CALL_TIMEOUT_S = 120.0
_PENDING = frozenset({"PROVISIONING", "STAGING", "PENDING"})
_RUNNING = frozenset({"RUNNING", "REPAIRING"})
ENV_OPTIONS = {
    "project": "SPOTHOP_GCP_PROJECT",
    "regions": "SPOTHOP_GCP_REGIONS",
    "endpoint_url": "SPOTHOP_GCP_ENDPOINT_URL",
    "image": "SPOTHOP_GCP_IMAGE",
    "network": "SPOTHOP_GCP_NETWORK",
    "service_account": "SPOTHOP_GCP_SERVICE_ACCOUNT",
    "install": "SPOTHOP_GCP_INSTALL",
}


class GcpProvider(Provider, OfferingNotes, ClockKeeper):
    """Compute Engine in ``project``, ``regions``. See the module docstring.

    ``credentials`` (google.auth credentials) and ``endpoint_url`` are for
    tests and private endpoints; ``clock`` times costs and backoff waits.
    """

    def __init__(
        self,
        name: str = NAME,
        *,
        project: str | None = None,
        regions: Sequence[str] | str | None = None,
        credentials: Any = None,
        endpoint_url: str | None = None,
        image: str | None = None,
        network: str | None = None,
        service_account: str | None = None,
        install: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            spot=True,
            on_demand=True,
            notice_lead_time_s=NOTICE_LEAD_TIME_S,
            notice_protocol="gcp",
            per_zone_spot_prices=False,
            max_price_bids=False,
            billing=BILLING,
            typical_boot_s=90.0,
            boot_deadline_s=BOOT_DEADLINE_S,
        )
        sdk.import_compute()
        found, adc_project = sdk.credentials(name, credentials)
        self.project = project or adc_project or os.environ.get("GOOGLE_CLOUD_PROJECT")
        if not self.project:
            raise ConfigError(
                f"{name}: no Google Cloud project; set project= or SPOTHOP_GCP_PROJECT "
                "(or GOOGLE_CLOUD_PROJECT, or `gcloud config set project`)"
            )
        self.regions = split_list(regions) or list(DEFAULT_REGIONS)
        self.image = image or DEFAULT_IMAGE
        self.network = network or "global/networks/default"
        self.service_account = service_account
        self.install = install
        self.clock: Clock = clock or WallClock()
        self._clients = sdk.make_clients(found, endpoint_url)
        self._where: dict[str, tuple[str, str]] = {}  # id → (zone, name)
        self._ended: dict[str, Instance] = {}  # what this provider ended itself
        self._zones: dict[str, list[str]] = {}
        self._sold: dict[str, set[str]] = {}  # zone → instance types it sells
        self._machines: dict[str, Any] = {}  # machine type → the API's MachineType
        self._notes: list[str] = []

    # -- plumbing ------------------------------------------------------------

    def _call(self, resource: str, method: str, **params: Any) -> Any:
        bound = getattr(self._clients[resource], method)
        return with_retries(
            lambda: bound(**params, retry=None, timeout=CALL_TIMEOUT_S), self.name, self.clock.sleep
        )

    def _list(self, resource: str, method: str, **params: Any) -> list[Any]:
        """Every item of a paged list call (the pager fetches each page inside the retry)."""
        bound = getattr(self._clients[resource], method)
        return with_retries(
            lambda: list(bound(**params, retry=None, timeout=CALL_TIMEOUT_S)),
            self.name,
            self.clock.sleep,
        )

    # -- offerings and prices --------------------------------------------------

    def zones(self, region: str) -> list[str]:
        """The zones of ``region`` that are up (cached)."""
        if region not in self._zones:
            rows = self._list("zones", "list", project=self.project)
            known = sorted({parse.tail(z.region) for z in rows})
            if region not in known:
                raise ConfigError(
                    f"{self.name}: project {self.project} has no region {region!r}; regions are "
                    f"spelled like us-central1 (known: {', '.join(known)})"
                )
            self._zones[region] = sorted(
                z.name for z in rows if parse.tail(z.region) == region and z.status != "DOWN"
            )
        return self._zones[region]

    def _sold_in(self, zone: str, known: Iterable[str]) -> set[str]:
        machines = {
            m.name: m for m in self._list("machine_types", "list", project=self.project, zone=zone)
        }
        accelerators = {
            a.name for a in self._list("accelerator_types", "list", project=self.project, zone=zone)
        }
        sold = set()
        for instance_type in known:
            shape = parse.machine_shape(instance_type)
            if shape.machine_type in machines and (
                shape.accelerator is None or shape.accelerator in accelerators
            ):
                sold.add(instance_type)
        self._sold[zone] = sold
        self._machines.update(machines)
        return sold

    def list_offerings(self) -> list[Offering]:
        self._notes = [
            "prices come from the built-in catalog: the Compute Engine API lists what each zone "
            "sells but no prices (those are in the Cloud Billing Catalog API)"
        ]
        builtin = [o for o in builtin_offerings() if o.provider == NAME]
        by_type: dict[str, Offering] = {}
        for o in builtin:
            by_type.setdefault(o.instance_type, o)
        today = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC).date()
        result: list[Offering] = []
        borrowed: set[str] = set()
        for region in self.regions:
            for zone in self.zones(region):
                for instance_type in sorted(self._sold_in(zone, by_type)):
                    row = _best_row(builtin, region, zone, instance_type)
                    if row.region != region:
                        borrowed.add(f"{instance_type} in {region}")
                    machine = self._machines[parse.machine_shape(instance_type).machine_type]
                    result.append(
                        row.model_copy(
                            update={
                                "provider": self.name,
                                "region": region,
                                "zone": zone,
                                "vcpus": float(machine.guest_cpus) or row.vcpus,
                                "memory_gib": (machine.memory_mb / parse.MIB_PER_GIB)
                                or row.memory_gib,
                                "price_date": today if row.region == region else row.price_date,
                                "source": "api+builtin-prices",
                            }
                        )
                    )
        if borrowed:
            self._notes.append(
                "the built-in catalog has no price for "
                + ", ".join(sorted(borrowed))
                + "; another region's price stands in"
            )
        return result

    def spot_prices(self, instance_types: Sequence[str] | None = None) -> list[SpotPrice]:
        wanted = set(instance_types) if instance_types else None
        now = self.clock.now()
        return [
            SpotPrice(
                self.name, o.region, o.zone, o.instance_type, o.spot_price_usd_per_hour, now, True
            )
            for o in self.list_offerings()
            if o.spot_price_usd_per_hour is not None
            and (wanted is None or o.instance_type in wanted)
        ]

    def offering_notes(self) -> list[str]:
        return list(self._notes)

    def _price(self, region: str, zone: str, instance_type: str, spot: bool) -> float:
        builtin = [
            o
            for o in builtin_offerings()
            if o.provider == NAME and o.instance_type == instance_type
        ]
        if not builtin:
            return 0.0
        row = _best_row(builtin, region, zone, instance_type)
        price = row.spot_price_usd_per_hour if spot else row.on_demand_price_usd_per_hour
        return price or row.on_demand_price_usd_per_hour or 0.0

    # -- launching -------------------------------------------------------------

    def _zone_for(self, request: LaunchRequest) -> str:
        if request.zone:
            return request.zone
        for zone in self.zones(request.region):
            sold = self._sold.get(zone)
            if sold is None:
                sold = self._sold_in(zone, [request.instance_type])
            if request.instance_type in sold:
                return zone
        raise InvalidRequest(
            self.name,
            ERROR_CODES.invalid_parameter,
            f"no zone of {request.region} sells {request.instance_type}",
            "name a zone, or a type the region sells (spothop catalog ls --provider gcp)",
        )

    def launch(self, request: LaunchRequest) -> Instance:
        refuse_reservation(self.name, ERROR_CODES.invalid_parameter, request)
        parse.machine_shape(request.instance_type)  # a malformed type is refused before any call
        zone = self._zone_for(request)
        region = parse.region_of_zone(zone)
        price = self._price(region, zone, request.instance_type, request.spot)
        if (
            request.spot
            and request.max_price_usd_per_hour is not None
            and request.max_price_usd_per_hour < price
        ):
            raise PriceTooLow(
                self.name,
                ERROR_CODES.bid_refused,
                f"Compute Engine takes no maximum spot price; the Spot VM price of "
                f"{request.instance_type} in {zone} is {price} USD/h, over the maximum "
                f"{request.max_price_usd_per_hour} asked",
                "raise max_price_usd_per_hour, or leave it unset",
            )
        token = request.tags.get(TOKEN_TAG) or new_token()
        tags, node = launch_tags(request.tags, request.name, token)
        name = parse.resource_name(request.name or node or "spothop", secrets.token_hex(4))
        body = instance_body(
            self.name,
            request,
            zone,
            name,
            tags,
            price,
            image=self.image,
            install=self.install,
            network=self.network,
            service_account=self.service_account,
        )
        request_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"spothop:{self.project}:{token}"))
        try:
            operation = self._call(
                "instances",
                "insert_unary",
                request={
                    "project": self.project,
                    "zone": zone,
                    "instance_resource": body,
                    "request_id": request_id,
                },
            )
        except InstanceNotFound as exc:  # the image or network named, never the new instance
            raise missing_resource(self.name, exc) from None
        try:
            self._finish(operation, zone)
            raw = self._call("instances", "get", project=self.project, zone=zone, instance=name)
        except BaseException:
            self._delete(zone, name)  # never leave a VM behind after raising
            raise
        self._where[str(raw.id)] = (zone, name)
        return self._instance(raw)

    def _finish(self, operation: Any, zone: str) -> None:
        """Wait for an insert's operation to be DONE; its first error raised as spothop's."""
        for _ in range(OPERATION_WAITS):
            if operation.status == sdk.import_compute().Operation.Status.DONE:
                break
            operation = self._call(
                "zone_operations", "wait", project=self.project, zone=zone, operation=operation.name
            )
        else:
            raise ProviderError(
                self.name, "timeout", f"operation {operation.name} in {zone} did not finish"
            )
        errors = list(operation.error.errors) if operation.error else []
        if errors:
            first = errors[0]
            raise missing_resource(
                self.name, map_error(self.name, str(first.code), str(first.message))
            )

    def _delete(self, zone: str, name: str) -> None:
        try:
            self._call("instances", "delete_unary", project=self.project, zone=zone, instance=name)
        except InstanceNotFound:
            pass
        except ProviderError as exc:
            log.warning("%s: %s in %s not deleted: %s", self.name, name, zone, exc)

    # -- describing and ending -------------------------------------------------

    def _aggregated(self, filter_text: str) -> list[Any]:
        pages = self._list(
            "instances", "aggregated_list", request={"project": self.project, "filter": filter_text}
        )
        return [vm for _, scoped in pages for vm in scoped.instances]

    def _raw(self, instance_id: str) -> Any | None:
        """The API's record of an id now, or None where the API has none."""
        where = self._where.get(instance_id)
        if where is not None:
            try:
                return self._call(
                    "instances", "get", project=self.project, zone=where[0], instance=where[1]
                )
            except InstanceNotFound:
                return None
        if not instance_id.isdigit():
            return None
        found = self._aggregated(f"id = {instance_id}")
        for vm in found:
            self._where[str(vm.id)] = (parse.tail(vm.zone), vm.name)
        return found[0] if found else None

    def console_output(self, instance_id: str) -> str:
        """Serial port 1 of the VM (``instances.getSerialPortOutput``): the startup script's
        output and the agent unit's, as Compute Engine keeps it (its last MiB). Empty for a VM
        spothop deleted, whose console went with it; InstanceNotFound for an unknown id."""
        if self._raw(instance_id) is None:
            if instance_id in self._ended:
                return ""
            self.describe(instance_id)  # InstanceNotFound, in the cloud's words
        zone, name = self._where[instance_id]
        try:
            output = self._call(
                "instances",
                "get_serial_port_output",
                request={
                    "project": self.project,
                    "zone": zone,
                    "instance": name,
                    "port": SERIAL_PORT,
                },
            )
        except InstanceNotFound:
            if instance_id in self._ended:
                return ""
            raise
        return str(output.contents or "")

    def describe(self, instance_id: str) -> Instance:
        if instance_id in self._ended:
            return self._ended[instance_id]
        raw = self._raw(instance_id)
        if raw is None:
            raise InstanceNotFound(
                self.name,
                ERROR_CODES.instance_not_found,
                f"The resource 'projects/{self.project}/instances/{instance_id}' was not found",
            )
        return self._instance(raw)

    def list_instances(self) -> list[Instance]:
        return self.find_instances()

    def find_instances(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Every VM spothop launched (it has the ``spothop-token`` label) with ``tags``, and those it ended."""
        terms = [f"labels.{TOKEN_TAG}:*"] + [
            f'labels.{parse.label_key(k)} = "{parse.label_value(v)}"'
            for k, v in (tags or {}).items()
        ]
        found: dict[str, Instance] = {}
        for raw in self._aggregated(" AND ".join(f"({t})" for t in terms)):
            self._where[str(raw.id)] = (parse.tail(raw.zone), raw.name)
            found[str(raw.id)] = self._instance(raw)
        found.update(ended_with_tags(self._ended, tags))
        return list(found.values())

    def terminate(self, instance_id: str) -> None:
        if instance_id in self._ended:
            return
        raw = self._raw(instance_id)
        if raw is None:
            return
        if not self._instance(raw).state.is_alive:
            return
        ended = self._instance(raw, ended_at=self.clock.now())
        self._delete(parse.tail(raw.zone), raw.name)
        self._ended[instance_id] = ended

    def _instance(self, raw: Any, ended_at: float | None = None) -> Instance:
        items = {i.key: i.value for i in raw.metadata.items} if raw.metadata else {}
        labels = dict(raw.labels)
        try:
            tags = {str(k): str(v) for k, v in json.loads(items.get(TAGS_ITEM, "")).items()}
        except ValueError:
            tags = labels
        spot = raw.scheduling.provisioning_model == "SPOT"
        zone = parse.tail(raw.zone)
        region = parse.region_of_zone(zone)
        instance_type = items.get(TYPE_ITEM) or parse.tail(raw.machine_type)
        launched_at = iso_seconds(raw.creation_timestamp)
        if ended_at is not None:
            state = InstanceState.TERMINATED
        elif raw.status in _PENDING:
            state = InstanceState.PENDING
        elif raw.status in _RUNNING:
            state = InstanceState.RUNNING
        else:  # STOPPING, STOPPED, TERMINATED, SUSPENDED: not by spothop's hand
            state = InstanceState.PREEMPTED if spot else InstanceState.TERMINATED
            ended_at = (
                iso_seconds(raw.last_stop_timestamp)
                if raw.last_stop_timestamp
                else self.clock.now()
            )
        try:
            price = float(items[PRICE_ITEM])
        except (KeyError, ValueError):
            price = self._price(region, zone, instance_type, spot)
        end = ended_at if ended_at is not None else self.clock.now()
        billed = BILLING.billed_seconds(max(0.0, end - launched_at))
        return Instance(
            instance_id=str(raw.id),
            provider=self.name,
            region=region,
            zone=zone,
            instance_type=instance_type,
            spot=spot,
            state=state,
            launched_at=launched_at,
            price_usd_per_hour=price,
            ended_at=ended_at,
            running_at=launched_at,
            billed_seconds=billed,
            cost_microusd=cost_microusd(price, billed),
            name=raw.name,
            tags=tags,
        )


class GcpFamily(OneNameFamily):
    """The registry's family for Compute Engine: one provider name, ``gcp``."""

    provider_name = NAME
    adapter = "Compute Engine"
    provider_class = GcpProvider
    taken = frozenset({*ENV_OPTIONS, "credentials", "clock"})
    env_options = ENV_OPTIONS


def _best_row(rows: Sequence[Offering], region: str, zone: str, instance_type: str) -> Offering:
    """The catalog row for the type: that zone's, else that region's, else the first anywhere."""
    mine = [o for o in rows if o.instance_type == instance_type]
    key: Callable[[Offering], tuple[bool, bool]] = lambda o: (o.zone != zone, o.region != region)  # noqa: E731
    return min(mine, key=key)
