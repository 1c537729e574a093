"""The ECS provider: spothop's provider contract (providers/base.py) over alibabacloud-ecs20140526.

What each method asks of ECS (RPC API 2014-05-26):

- ``list_offerings``: ``DescribeAvailableResource`` (which zones have stock
  of which instance types, for spot pay-as-you-go), and
  ``DescribeSpotPriceHistory`` per type: the newest ``SpotPrice`` per zone,
  and its ``OriginPrice`` (the pay-as-you-go price) as the on-demand price.
  Specs and GPUs come from the built-in catalog's row of the type.
- ``spot_prices``: the same two calls; a zone whose stock reads
  ``SoldOut`` is ``available=False``.
- ``launch``: ``RunInstances`` (``InstanceChargeType`` ``PostPaid``; spot:
  ``SpotStrategy`` ``SpotAsPriceGo``, or ``SpotWithPriceLimit`` with
  ``SpotPriceLimit`` when a maximum price is asked, ``SpotDuration`` the
  protection hours (1: not reclaimed in the first hour), ``SpotInterruptionBehavior``
  ``Terminate``), the user-data of :mod:`spothop.providers.aliyun.userdata`,
  tags, the request's ``image_id`` (else the configured one), its ``disk`` as
  ``SystemDisk.Size`` and the tier's category (:data:`SYSTEM_DISK_TIERS`),
  and the launch token as ``ClientToken`` (a retried call cannot start
  a second instance).
- ``describe`` / ``list_instances`` / ``terminate``: ``DescribeInstances``
  (by id; by the ``spothop-token`` tag, ``NextToken`` paged),
  ``DeleteInstance`` with ``Force`` (idempotent).
- ``console_output`` (:class:`~spothop.providers.extensions.ConsoleOutput`):
  ``GetInstanceConsoleOutput`` (Base64 in the answer, decoded; control
  sequences removed by ECS), where cloud-init and the agent's unit write (the
  boot log's tail for a lost agent); an instance the provider deleted, gone
  from the API, shows an empty console.

Prices: ECS quotes a China region in CNY and the international regions in
USD; every price is normalised to USD with spothop's rate table
(:func:`spothop.resources.currency.load_rates`), the original kept in the
offering (``currency``, ``*_price_original``). A maximum price asked in USD
is sent as ``SpotPriceLimit`` in the region's currency.

A deleted instance leaves the API at once: the provider keeps what it ended
itself and describes it ``terminated`` from that record. A spot instance ECS
is reclaiming (``OperationLocks`` ``Recycling``) reads ``noticed`` while it
runs and ``preempted`` once stopped.

Tags on every instance: the launch's (``spothop-job``, ``spothop-node``,
``spothop-token``), and ``spothop-price-usd-per-hour`` (the rate at launch).
``cost_microusd`` is that rate × the seconds from ``CreationTime``: an
estimate; the bill is Alibaba Cloud's.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spothop.errors import ConfigError, InstanceNotFound
from spothop.market.clock import Clock, WallClock
from spothop.providers.aliyun import sdk
from spothop.providers.aliyun.errors import map_error, with_retries
from spothop.providers.aliyun.userdata import render_user_data
from spothop.providers.base import (
    BOOT_DEADLINE_S,
    Capabilities,
    DiskSpec,
    DiskTier,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    SpotPrice,
)
from spothop.providers.extensions import ClockKeeper, OfferingNotes
from spothop.providers.local.metadata.aliyun import BILLING, ERROR_CODES
from spothop.providers.records import (
    TOKEN_TAG,
    OneNameFamily,
    cost_microusd,
    ended_with_tags,
    iso_seconds,
    launch_tags,
    new_token,
    number_text,
    split_list,
)
from spothop.providers.reservations import refuse_reservation
from spothop.resources.catalog import builtin_offerings
from spothop.resources.currency import RateTable, load_rates
from spothop.resources.offering import Offering

log = logging.getLogger("spothop.providers.aliyun")

NAME = "aliyun"
DEFAULT_REGIONS = ("cn-hangzhou",)
PRICE_TAG = "spothop-price-usd-per-hour"
DEFAULT_IMAGE_FAMILY = "acs:ubuntu_22_04_x64"
# SkyPilot's disk tiers as ECS system disk categories and ESSD performance levels (an ESSD
# PL2 needs at least 461 GiB: ECS refuses a smaller one with its own code).
SYSTEM_DISK_TIERS: Mapping[DiskTier, dict[str, str]] = {
    DiskTier.LOW: {"SystemDisk.Category": "cloud_efficiency"},
    DiskTier.MEDIUM: {"SystemDisk.Category": "cloud_essd", "SystemDisk.PerformanceLevel": "PL0"},
    DiskTier.HIGH: {"SystemDisk.Category": "cloud_essd", "SystemDisk.PerformanceLevel": "PL1"},
    DiskTier.ULTRA: {"SystemDisk.Category": "cloud_essd", "SystemDisk.PerformanceLevel": "PL2"},
    DiskTier.BEST: {"SystemDisk.Category": "cloud_essd", "SystemDisk.PerformanceLevel": "PL2"},
}


def system_disk(disk: DiskSpec | None) -> dict[str, Any]:
    """RunInstances' ``SystemDisk.*`` parameters for the root volume asked for (none: ECS's
    default system disk)."""
    if disk is None:
        return {}
    params: dict[str, Any] = dict(SYSTEM_DISK_TIERS[disk.tier]) if disk.tier else {}
    if disk.size_gib is not None:
        params["SystemDisk.Size"] = disk.size_gib
    return params


NOTICE_LEAD_TIME_S = (
    300.0  # ECS: a reclaimed spot instance is released about 5 minutes after notice
)
PAGE_SIZE = 100  # DescribeInstances: at most 100 per page
_PENDING = frozenset({"Pending", "Starting"})
_ENDED = frozenset({"Stopping", "Stopped", "Deleted"})
ENV_OPTIONS = {
    "regions": "SPOTHOP_ALIYUN_REGIONS",
    "endpoint_url": "SPOTHOP_ALIYUN_ENDPOINT_URL",
    "image_id": "SPOTHOP_ALIYUN_IMAGE_ID",
    "security_group_id": "SPOTHOP_ALIYUN_SECURITY_GROUP_ID",
    "vswitch_id": "SPOTHOP_ALIYUN_VSWITCH_ID",
    "ram_role": "SPOTHOP_ALIYUN_RAM_ROLE",
    "install": "SPOTHOP_ALIYUN_INSTALL",
    "spot_duration_hours": "SPOTHOP_ALIYUN_SPOT_DURATION_HOURS",
}


def region_currency(region: str) -> str:
    """ECS quotes mainland China regions (``cn-*``) in CNY, the international ones in USD."""
    return "CNY" if region.startswith("cn-") else "USD"


class AliyunProvider(Provider, OfferingNotes, ClockKeeper):
    """ECS in ``regions``. See the module docstring.

    ``endpoint_url`` (tests, private endpoints; ``http://`` allowed) replaces
    every region's endpoint; ``clock`` times costs and backoff waits;
    ``rates`` the exchange rates (default spothop's table with the user's overrides).
    """

    def __init__(
        self,
        name: str = NAME,
        *,
        regions: Sequence[str] | str | None = None,
        endpoint_url: str | None = None,
        image_id: str | None = None,
        security_group_id: str | None = None,
        vswitch_id: str | None = None,
        ram_role: str | None = None,
        install: str | None = None,
        spot_duration_hours: int | str = 1,
        clock: Clock | None = None,
        rates: RateTable | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            spot=True,
            on_demand=True,
            notice_lead_time_s=NOTICE_LEAD_TIME_S,
            notice_protocol="aliyun",
            per_zone_spot_prices=True,
            max_price_bids=True,
            billing=BILLING,
            typical_boot_s=120.0,
            boot_deadline_s=BOOT_DEADLINE_S,
        )
        sdk.import_ecs()
        self._credential = sdk.credential(name)
        self.regions = split_list(regions) or list(DEFAULT_REGIONS)
        self.endpoint_url = endpoint_url
        self.image_id = image_id
        self.security_group_id = security_group_id
        self.vswitch_id = vswitch_id
        self.ram_role = ram_role
        self.install = install
        if str(spot_duration_hours) not in ("0", "1"):
            raise ConfigError(
                f"spot_duration_hours must be 0 (no protection period) or 1 (one hour), got {spot_duration_hours!r}"
            )
        self.spot_duration_hours = int(spot_duration_hours)
        self.clock: Clock = clock or WallClock()
        self.rates = rates or load_rates()
        self._clients: dict[str, Any] = {}
        self._region_of: dict[str, str] = {}
        self._ended: dict[str, Instance] = {}
        self._notes: list[str] = []

    # -- plumbing ------------------------------------------------------------

    def _call(self, region: str, action: str, **params: Any) -> dict[str, Any]:
        if region not in self._clients:
            self._clients[region] = sdk.make_client(
                self.name, region, self.endpoint_url, self._credential
            )
        client = self._clients[region]
        return with_retries(
            lambda: sdk.call(client, action, {"RegionId": region, **params}),
            self.name,
            self.clock.sleep,
        )

    def usd(self, amount: float, region: str) -> float:
        """A price ECS quoted in ``region``'s currency, in USD."""
        return self.rates.to_usd(amount, region_currency(region))

    # -- offerings and prices --------------------------------------------------

    def _stock(self, region: str) -> dict[tuple[str, str], bool]:
        """(zone, type) → in stock, for spot pay-as-you-go (``DescribeAvailableResource``)."""
        answer = self._call(
            region,
            "DescribeAvailableResource",
            DestinationResource="InstanceType",
            InstanceChargeType="PostPaid",
            SpotStrategy="SpotAsPriceGo",
        )
        stock: dict[tuple[str, str], bool] = {}
        for zone in (answer.get("AvailableZones") or {}).get("AvailableZone", []):
            for group in (zone.get("AvailableResources") or {}).get("AvailableResource", []):
                for row in (group.get("SupportedResources") or {}).get("SupportedResource", []):
                    stock[(str(zone["ZoneId"]), str(row["Value"]))] = (
                        row.get("Status") == "Available"
                    )
        return stock

    def _history(
        self, region: str, instance_type: str
    ) -> dict[str, tuple[float, float | None, float]]:
        """zone → (spot price, pay-as-you-go price or None, when), the newest row of each zone."""
        start = dt.datetime.fromtimestamp(self.clock.now() - 3 * 3600, dt.UTC)
        answer = self._call(
            region,
            "DescribeSpotPriceHistory",
            InstanceType=instance_type,
            NetworkType="vpc",
            OSType="linux",
            StartTime=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        latest: dict[str, tuple[float, float | None, float]] = {}
        for row in (answer.get("SpotPrices") or {}).get("SpotPriceType", []):
            when = iso_seconds(str(row.get("Timestamp")))
            zone = str(row["ZoneId"])
            if zone not in latest or latest[zone][2] <= when:
                origin = row.get("OriginPrice")
                latest[zone] = (float(row["SpotPrice"]), float(origin) if origin else None, when)
        return latest

    def _markets(self, region: str) -> list[tuple[Offering, str, float, float | None, float, bool]]:
        """(catalog row, zone, spot, on-demand, when, in stock) per market the region sells."""
        rows = {o.instance_type: o for o in builtin_offerings() if o.provider == NAME}
        stock = self._stock(region)
        unknown = sorted({t for _, t in stock} - set(rows))
        if unknown:
            self._notes.append(
                f"{region}: {len(unknown)} instance types in stock have no GPU specs in the built-in "
                f"catalog and are left out ({', '.join(unknown[:5])}{', …' if len(unknown) > 5 else ''})"
            )
        found = []
        for instance_type in sorted({t for _, t in stock if t in rows}):
            for zone, (spot, origin, when) in sorted(self._history(region, instance_type).items()):
                if (zone, instance_type) in stock:
                    found.append(
                        (
                            rows[instance_type],
                            zone,
                            spot,
                            origin,
                            when,
                            stock[(zone, instance_type)],
                        )
                    )
        return found

    def list_offerings(self) -> list[Offering]:
        self._notes = []
        today = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC).date()
        result = []
        for region in self.regions:
            currency = region_currency(region)
            for row, zone, spot, origin, _, _ in self._markets(region):
                on_demand = origin if origin is not None else row.on_demand_price_original
                result.append(
                    row.model_copy(
                        update={
                            "provider": self.name,
                            "region": region,
                            "zone": zone,
                            "currency": currency,
                            "spot_price_original": spot,
                            "spot_price_usd_per_hour": self.usd(spot, region),
                            "on_demand_price_original": on_demand,
                            "on_demand_price_usd_per_hour": self.usd(on_demand, region)
                            if on_demand
                            else None,
                            "price_date": today,
                            "source": "api",
                        }
                    )
                )
        return result

    def spot_prices(self, instance_types: Sequence[str] | None = None) -> list[SpotPrice]:
        wanted = set(instance_types) if instance_types else None
        prices = []
        for region in self.regions:
            for row, zone, spot, _, when, in_stock in self._markets(region):
                if wanted is None or row.instance_type in wanted:
                    prices.append(
                        SpotPrice(
                            self.name,
                            region,
                            zone,
                            row.instance_type,
                            self.usd(spot, region),
                            when,
                            in_stock,
                        )
                    )
        return prices

    def offering_notes(self) -> list[str]:
        return list(self._notes)

    def _price(self, region: str, zone: str | None, instance_type: str, spot: bool) -> float:
        """The USD rate of that market now: its newest spot price, else its pay-as-you-go price."""
        history = self._history(region, instance_type)
        here = [v for z, v in history.items() if zone is None or z == zone]
        if not here:
            return 0.0
        spot_price, origin, _ = min(here)
        return self.usd(spot_price if spot or origin is None else origin, region)

    # -- launching -------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        refuse_reservation(self.name, ERROR_CODES.invalid_parameter, request)
        region = request.region
        env = {"SPOTHOP_CLOUD": self.name, **request.env}
        user_data = render_user_data(
            request.bootstrap_command,
            env,
            install=self.install,
            image=request.image,
            distribution=request.distribution,
        )
        token = request.tags.get(TOKEN_TAG) or new_token()
        tags, node = launch_tags(request.tags, request.name, token)
        price = self._price(region, request.zone, request.instance_type, request.spot)
        tags[PRICE_TAG] = number_text(price)
        params: dict[str, Any] = {
            "InstanceType": request.instance_type,
            "InstanceChargeType": "PostPaid",
            "Amount": 1,
            "ClientToken": token[:64],
            "UserData": base64.b64encode(user_data.encode()).decode("ascii"),
            "Tag": [{"Key": k, "Value": v} for k, v in tags.items()],
            "InstanceName": (request.name or node or f"spothop-{token}")[:128],
        }
        image = request.image_id or self.image_id
        params |= {"ImageId": image} if image else {"ImageFamily": DEFAULT_IMAGE_FAMILY}
        params |= system_disk(request.disk)
        if request.zone:
            params["ZoneId"] = request.zone
        for key, value in (
            ("SecurityGroupId", self.security_group_id),
            ("VSwitchId", self.vswitch_id),
            ("RamRoleName", self.ram_role),
        ):
            if value:
                params[key] = value
        if request.spot:
            params["SpotDuration"] = self.spot_duration_hours
            params["SpotInterruptionBehavior"] = "Terminate"
            if request.max_price_usd_per_hour is not None:
                limit = request.max_price_usd_per_hour / self.rates.to_usd(
                    1.0, region_currency(region)
                )
                params |= {"SpotStrategy": "SpotWithPriceLimit", "SpotPriceLimit": f"{limit:.4f}"}
            else:
                params["SpotStrategy"] = "SpotAsPriceGo"
        else:
            params["SpotStrategy"] = "NoSpot"
        answer = self._call(region, "RunInstances", **params)
        ids = (answer.get("InstanceIdSets") or {}).get("InstanceIdSet", [])
        if not ids:
            raise map_error(
                self.name, ERROR_CODES.internal_error, f"RunInstances started no instance: {answer}"
            )
        instance_id = str(ids[0])
        self._region_of[instance_id] = region
        try:
            return self.describe(instance_id)
        except BaseException:
            self.terminate(instance_id)
            raise

    # -- describing and ending -------------------------------------------------

    def _describe_raw(self, region: str, **params: Any) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self._call(
                region,
                "DescribeInstances",
                MaxResults=PAGE_SIZE,
                **params,
                **({"NextToken": token} if token else {}),
            )
            found.extend((page.get("Instances") or {}).get("Instance", []))
            token = page.get("NextToken") or None
            if not token:
                return found

    def _raw(self, instance_id: str) -> tuple[str, dict[str, Any]] | None:
        regions = [self._region_of[instance_id]] if instance_id in self._region_of else []
        regions += [r for r in self.regions if r not in regions]
        for region in regions:
            found = self._describe_raw(region, InstanceIds=json.dumps([instance_id]))
            if found:
                self._region_of[instance_id] = region
                return region, found[0]
        return None

    def console_output(self, instance_id: str) -> str:
        """The instance's console as ECS keeps it (``GetInstanceConsoleOutput``): cloud-init's
        output, the user data's and the agent unit's. Empty for an instance spothop deleted,
        whose console went with it; InstanceNotFound for an unknown id."""
        found = self._raw(instance_id)
        if found is None:
            if instance_id in self._ended:
                return ""
            self.describe(instance_id)  # InstanceNotFound, in the cloud's words
            return ""
        try:
            answer = self._call(
                found[0], "GetInstanceConsoleOutput", InstanceId=instance_id, RemoveSymbols="true"
            )
        except InstanceNotFound:
            if instance_id in self._ended:
                return ""
            raise
        encoded = str(answer.get("ConsoleOutput") or "")
        return base64.b64decode(encoded).decode("utf-8", errors="replace")

    def describe(self, instance_id: str) -> Instance:
        if instance_id in self._ended:
            return self._ended[instance_id]
        found = self._raw(instance_id)
        if found is None:
            raise InstanceNotFound(
                self.name,
                ERROR_CODES.instance_not_found,
                f"The specified InstanceId {instance_id} does not exist.",
            )
        return self._instance(found[1], found[0])

    def list_instances(self) -> list[Instance]:
        return self.find_instances()

    def find_instances(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Every instance spothop launched (it has ``spothop-token``) with ``tags``, and those it ended."""
        wanted = [{"Key": TOKEN_TAG}] + [{"Key": k, "Value": v} for k, v in (tags or {}).items()]
        found: dict[str, Instance] = {}
        for region in dict.fromkeys([*self.regions, *self._region_of.values()]):
            for raw in self._describe_raw(region, Tag=wanted):
                self._region_of[str(raw["InstanceId"])] = region
                found[str(raw["InstanceId"])] = self._instance(raw, region)
        found.update(ended_with_tags(self._ended, tags))
        return list(found.values())

    def terminate(self, instance_id: str) -> None:
        if instance_id in self._ended:
            return
        found = self._raw(instance_id)
        if found is None:
            return
        region, raw = found
        if not self._instance(raw, region).state.is_alive:
            return
        ended = self._instance(raw, region, ended_at=self.clock.now())
        with contextlib.suppress(InstanceNotFound):  # deleted meanwhile: what was asked
            self._call(region, "DeleteInstance", InstanceId=instance_id, Force="true")
        self._ended[instance_id] = ended

    def _instance(
        self, raw: Mapping[str, Any], region: str, ended_at: float | None = None
    ) -> Instance:
        tags = {
            str(t["TagKey"]): str(t.get("TagValue", ""))
            for t in (raw.get("Tags") or {}).get("Tag", [])
        }
        spot = raw.get("SpotStrategy") in ("SpotAsPriceGo", "SpotWithPriceLimit")
        locks = {
            str(lock.get("LockReason"))
            for lock in (raw.get("OperationLocks") or {}).get("LockReason", [])
        }
        status = str(raw.get("Status"))
        launched_at = iso_seconds(str(raw["CreationTime"]))
        notice_time = termination_time = None
        if ended_at is not None:
            state = InstanceState.TERMINATED
        elif status in _ENDED:
            state = (
                InstanceState.PREEMPTED
                if spot and "Recycling" in locks
                else InstanceState.TERMINATED
            )
            ended_at = self.clock.now()
        elif "Recycling" in locks and spot:
            state = InstanceState.NOTICED
            notice_time = self.clock.now()
            termination_time = notice_time + NOTICE_LEAD_TIME_S
        else:
            state = InstanceState.PENDING if status in _PENDING else InstanceState.RUNNING
        try:
            price = float(tags[PRICE_TAG])
        except (KeyError, ValueError):
            price = self._price(region, raw.get("ZoneId"), str(raw["InstanceType"]), spot)
        end = ended_at if ended_at is not None else self.clock.now()
        billed = BILLING.billed_seconds(max(0.0, end - launched_at))
        return Instance(
            instance_id=str(raw["InstanceId"]),
            provider=self.name,
            region=region,
            zone=raw.get("ZoneId"),
            instance_type=str(raw["InstanceType"]),
            spot=spot,
            state=state,
            launched_at=launched_at,
            price_usd_per_hour=price,
            ended_at=ended_at,
            running_at=launched_at,
            billed_seconds=billed,
            cost_microusd=cost_microusd(price, billed),
            notice_time=notice_time,
            termination_time=termination_time,
            name=raw.get("InstanceName"),
            tags=tags,
        )


class AliyunFamily(OneNameFamily):
    """The registry's family for ECS: one provider name, ``aliyun``."""

    provider_name = NAME
    adapter = "ECS"
    provider_class = AliyunProvider
    taken = frozenset({*ENV_OPTIONS, "clock", "rates"})
    env_options = ENV_OPTIONS
