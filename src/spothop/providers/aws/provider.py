"""The EC2 provider: spothop's provider contract (providers/base.py) over boto3.

What each method asks of EC2 (every list call paginated with ``NextToken``):

- ``list_offerings``: ``DescribeInstanceTypes`` (the GPU families, ``GpuInfo``),
  ``DescribeInstanceTypeOfferings`` (which zones sell each type), on-demand
  prices from the Pricing API (``GetProducts``; where it cannot be reached the
  built-in catalog's prices stand in, and :meth:`offering_notes` says so) and
  spot prices from ``DescribeSpotPriceHistory``.
- ``spot_prices``: ``DescribeSpotPriceHistory`` (the newest Linux price per
  zone and type), ``available`` from ``GetSpotPlacementScores`` where the
  account may call it (a score under :data:`AVAILABLE_MIN_SCORE` is not
  available); where it may not (or the API is not there, as on moto) every
  market reads available and the notes say why.
- ``launch``: ``RunInstances``, spot as ``InstanceMarketOptions`` one-time
  with ``terminate`` on interruption, IMDSv2 required, the launch token as
  ``ClientToken`` (a retried call cannot start a second instance) and the
  user-data of :mod:`spothop.providers.aws.userdata`.
- ``launch_fleet`` (:class:`~spothop.providers.extensions.FleetLauncher`):
  ``CreateFleet`` of type ``instant`` with the ``price-capacity-optimized``
  spot allocation across every type and zone asked, from a launch template
  made for the call and deleted after it.
- ``describe`` / ``list_instances`` / ``terminate``: ``DescribeInstances``
  (by id; by tag), ``TerminateInstances`` (idempotent); a live spot
  instance whose request ``DescribeSpotInstanceRequests`` shows
  ``marked-for-termination`` reads ``noticed`` (notice and termination times
  from the status's ``UpdateTime`` and EC2's two minutes).

Tags on every instance: the launch's own (``spothop-job``, ``spothop-node``,
``spothop-token``: the launch token, made here when the caller gave none),
``Name``, and ``spothop-price-usd-per-hour`` (the rate at launch, what
``cost_microusd`` is computed from). ``terminate`` first tags
``spothop-ended-at`` (the provider clock's time) so the cost stops there;
an instance ended by EC2 stops at the time its ``StateTransitionReason`` gives.
``cost_microusd`` is an estimate (the rate at launch × seconds since
``LaunchTime``); the bill is AWS's.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from spothop.errors import (
    CapacityUnavailable,
    ConfigError,
    InstanceNotFound,
    ProviderError,
)
from spothop.market.clock import Clock, WallClock
from spothop.providers.aws import offerings as parse
from spothop.providers.aws import sdk
from spothop.providers.aws.errors import map_error, with_retries
from spothop.providers.aws.userdata import render_user_data
from spothop.providers.base import (
    Capabilities,
    Instance,
    InstanceState,
    LaunchRequest,
    Provider,
    SpotPrice,
)
from spothop.providers.extensions import (
    ClockKeeper,
    FleetLauncher,
    FleetRequest,
    FleetResult,
    OfferingNotes,
)
from spothop.providers.local.metadata.aws import BILLING, ERROR_CODES
from spothop.providers.records import (
    NODE_TAG,
    TOKEN_TAG,
    OneNameFamily,
    cost_microusd,
    launch_tags,
    new_token,
    number_text,
    split_list,
)
from spothop.providers.reservations import refuse_reservation
from spothop.resources.catalog import builtin_offerings
from spothop.resources.offering import Offering

log = logging.getLogger("spothop.providers.aws")

NAME = "aws"
DEFAULT_REGION = "us-east-1"
JOB_TAG = "spothop-job"
PRICE_TAG = "spothop-price-usd-per-hour"
ENDED_TAG = "spothop-ended-at"
AVAILABLE_MIN_SCORE = 3  # GetSpotPlacementScores: 1 (unlikely to be filled) … 10 (highly likely)
PLACEMENT_SCORE_MAX_TYPES = 10  # one call per type: asked only for this many types at once
FILTER_VALUES_MAX = 100  # values per filter in one call; more go in further calls
SPOT_QUOTE_TTL_S = 300.0  # a launch's spot price comes from quotes at most this old
PRICING_REGION = "us-east-1"  # the Pricing API's endpoint region
DEEP_LEARNING_AMI = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
# EC2 keeps page sizes per call: DescribeInstanceTypes 5-100, the others 5-1000.
PAGE_SIZES = {
    "describe_instance_types": 100,
    "describe_instance_type_offerings": 1000,
    "describe_spot_price_history": 1000,
    "describe_instances": 1000,
}
_ENDED_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_PREEMPTION_REASONS = frozenset({"Server.SpotInstanceTermination", "Server.SpotInstanceShutdown"})
_FAILURE_REASONS = frozenset(
    {
        "Server.InternalError",
        "Server.InsufficientInstanceCapacity",
        "Client.InternalError",
        "Client.VolumeLimitExceeded",
        "Client.InvalidSnapshot.NotFound",
    }
)
# DescribeSpotInstanceRequests status codes of a request EC2 is about to interrupt.
_INTERRUPTION_CODES = frozenset(
    {"marked-for-termination", "marked-for-stop", "marked-for-hibernation"}
)
NOTICE_LEAD_TIME_S = 120.0  # EC2: the interruption notice comes two minutes before the action
_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")

ENV_OPTIONS = {  # option → the environment variable that sets it when the option is not given
    "regions": "SPOTHOP_AWS_REGIONS",
    "endpoint_url": "SPOTHOP_AWS_ENDPOINT_URL",
    "image_id": "SPOTHOP_AWS_IMAGE_ID",
    "instance_profile": "SPOTHOP_AWS_INSTANCE_PROFILE",
    "security_group_ids": "SPOTHOP_AWS_SECURITY_GROUP_IDS",
    "key_name": "SPOTHOP_AWS_KEY_NAME",
    "install": "SPOTHOP_AWS_INSTALL",
}


class AwsProvider(Provider, FleetLauncher, OfferingNotes, ClockKeeper):
    """EC2 in ``regions`` (the session's region when none are given). See the module docstring.

    ``session`` (a boto3 Session) and ``endpoint_url`` (moto's server, say)
    are for tests and private endpoints; ``clock`` times costs and backoff
    waits; ``page_size`` caps every page (EC2's own limits otherwise).
    """

    def __init__(
        self,
        name: str = NAME,
        *,
        regions: Sequence[str] | str | None = None,
        profile: str | None = None,
        session: Any = None,
        endpoint_url: str | None = None,
        image_id: str | None = None,
        instance_profile: str | None = None,
        security_group_ids: Sequence[str] | str | None = None,
        key_name: str | None = None,
        install: str | None = None,
        clock: Clock | None = None,
        placement_scores: bool = True,
        pricing: bool = True,
        page_size: int | None = None,
    ) -> None:
        self.name = name
        self.capabilities = Capabilities(
            spot=True,
            on_demand=True,
            notice_lead_time_s=NOTICE_LEAD_TIME_S,
            advance_notice=True,
            notice_protocol="aws",
            per_zone_spot_prices=True,
            max_price_bids=True,
            billing=BILLING,  # EC2's rule, declared beside the imitated protocol
            typical_boot_s=120.0,  # GPU AMI to agent up: 1-2 min (docs/placement.md, boot)
        )
        self._session = sdk.make_session(profile, session)
        sdk.check_credentials(name, self._session)
        asked = split_list(regions) or [sdk.default_region(self._session) or DEFAULT_REGION]
        self.regions = [sdk.check_region(name, self._session, r) for r in asked]
        self.endpoint_url = endpoint_url
        self.image_id = image_id
        self.instance_profile = instance_profile
        self.security_group_ids = split_list(security_group_ids)
        self.key_name = key_name
        self.install = install
        self.clock: Clock = clock or WallClock()
        self.placement_scores = placement_scores
        self.pricing = pricing
        self.page_size = page_size
        self._clients: dict[tuple[str, str], Any] = {}
        self._types: dict[str, dict[str, parse.GpuType]] = {}
        self._on_demand: dict[str, dict[str, float]] = {}
        self._quotes: dict[str, tuple[float, dict[tuple[str, str], parse.SpotQuote]]] = {}
        self._images: dict[str, str] = {}
        self._region_of: dict[str, str] = {}
        self._notes: list[str] = []

    # -- plumbing ------------------------------------------------------------

    def client(self, region: str, service: str = "ec2") -> Any:
        """The boto3 client for ``service`` in ``region`` (one per pair, made on first use)."""
        key = (service, region)
        if key not in self._clients:
            self._clients[key] = sdk.make_client(self._session, service, region, self.endpoint_url)
        return self._clients[key]

    def _call(self, region: str, operation: str, service: str = "ec2", **params: Any) -> Any:
        method = getattr(self.client(region, service), operation)
        return with_retries(lambda: method(**params), self.name, self.clock.sleep)

    def _pages(self, region: str, operation: str, **params: Any) -> Iterator[Any]:
        """Every page of a NextToken-paginated EC2 call, each page retried on its own."""
        size = PAGE_SIZES.get(operation)
        if size is not None and self.page_size is not None:
            size = min(size, self.page_size)
        token: str | None = None
        while True:
            args = dict(params)
            if size is not None:
                args["MaxResults"] = size
            if token:
                args["NextToken"] = token
            page = self._call(region, operation, **args)
            yield page
            token = page.get("NextToken")
            if not token:
                return

    # -- offerings and prices --------------------------------------------------

    def gpu_types(self, region: str) -> dict[str, parse.GpuType]:
        """instance type → its GPU type, for every GPU type EC2 has in ``region`` (cached)."""
        if region not in self._types:
            found: dict[str, parse.GpuType] = {}
            filters = [{"Name": "instance-type", "Values": list(parse.GPU_TYPE_PATTERNS)}]
            for page in self._pages(region, "describe_instance_types", Filters=filters):
                for raw in page.get("InstanceTypes", []):
                    kind = parse.gpu_type(raw)
                    if kind is not None:
                        found[kind.instance_type] = kind
            self._types[region] = found
        return self._types[region]

    def _zones(self, region: str, instance_types: Sequence[str]) -> dict[str, list[str]]:
        """instance type → the zones of ``region`` that sell it."""
        zones: dict[str, list[str]] = {}
        for start in range(0, len(instance_types), FILTER_VALUES_MAX):
            chunk = list(instance_types[start : start + FILTER_VALUES_MAX])
            for page in self._pages(
                region,
                "describe_instance_type_offerings",
                LocationType="availability-zone",
                Filters=[{"Name": "instance-type", "Values": chunk}],
            ):
                for row in page.get("InstanceTypeOfferings", []):
                    zones.setdefault(row["InstanceType"], []).append(row["Location"])
        return zones

    def list_offerings(self) -> list[Offering]:
        self._notes = []
        today = dt.datetime.fromtimestamp(self.clock.now(), dt.UTC).date()
        builtin = {
            (o.region, o.instance_type): o for o in builtin_offerings() if o.provider == NAME
        }
        known = {t: o.interconnect for (_, t), o in builtin.items()}
        result: list[Offering] = []
        for region in self.regions:
            types = self.gpu_types(region)
            on_demand, source = self._on_demand_prices(region, builtin)
            quotes = self._spot_quotes(region, sorted(types), fresh=True)
            for instance_type, zones in sorted(self._zones(region, sorted(types)).items()):
                kind = types.get(instance_type)
                if kind is None:
                    continue
                for zone in sorted(zones):
                    quote = quotes.get((zone, instance_type))
                    made = parse.offering(
                        self.name,
                        region,
                        zone,
                        kind,
                        on_demand_usd_per_hour=on_demand.get(instance_type),
                        spot_usd_per_hour=quote.price_usd_per_hour if quote else None,
                        known_interconnect=known.get(instance_type),
                        price_date=today,
                        source=source,
                    )
                    if made is not None:
                        result.append(made)
        return result

    def _on_demand_prices(
        self, region: str, builtin: Mapping[tuple[str, str], Offering]
    ) -> tuple[dict[str, float], str]:
        """instance type → on-demand USD/h in ``region``, and where the prices came from."""
        if region in self._on_demand:
            return self._on_demand[region], "api"
        fallback = {
            t: o.on_demand_price_usd_per_hour
            for (r, t), o in builtin.items()
            if r == region and o.on_demand_price_usd_per_hour is not None
        }
        if not self.pricing:
            self._notes.append(
                f"on-demand prices in {region}: the Pricing API is switched off (pricing=False); "
                f"the built-in catalog's prices stand in ({len(fallback)} types)"
            )
            return fallback, "api+builtin-on-demand"
        try:
            prices = self._pricing_api(region)
        except (ProviderError, NotImplementedError) as exc:
            self._notes.append(
                f"on-demand prices in {region}: the Pricing API could not be reached ({exc}); "
                f"the built-in catalog's prices stand in ({len(fallback)} types)"
            )
            return fallback, "api+builtin-on-demand"
        if not prices:
            self._notes.append(
                f"on-demand prices in {region}: the Pricing API listed no GPU instance; "
                f"the built-in catalog's prices stand in ({len(fallback)} types)"
            )
            return fallback, "api+builtin-on-demand"
        self._on_demand[region] = prices
        return prices, "api"

    def _pricing_api(self, region: str) -> dict[str, float]:
        filters = [
            {"Type": "TERM_MATCH", "Field": field, "Value": value}
            for field, value in (
                ("regionCode", region),
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
                ("instanceFamily", "GPU instance"),
            )
        ]
        prices: dict[str, float] = {}
        token: str | None = None
        while True:
            args: dict[str, Any] = {
                "ServiceCode": "AmazonEC2",
                "Filters": filters,
                "FormatVersion": "aws_v1",
                "MaxResults": 100,
            }
            if token:
                args["NextToken"] = token
            page = self._call(PRICING_REGION, "get_products", service="pricing", **args)
            prices.update(parse.on_demand_prices(page.get("PriceList", [])))
            token = page.get("NextToken")
            if not token:
                return prices

    def _spot_quotes(
        self, region: str, instance_types: Sequence[str], fresh: bool = False
    ) -> dict[tuple[str, str], parse.SpotQuote]:
        cached = self._quotes.get(region)
        now = self.clock.now()
        if cached is not None and not fresh and now - cached[0] < SPOT_QUOTE_TTL_S:
            wanted = set(instance_types)
            if all(any(t == k[1] for k in cached[1]) for t in wanted):
                return cached[1]
        if not instance_types:
            return {}
        rows: list[Any] = []
        start = dt.datetime.fromtimestamp(now, dt.UTC)
        for page in self._pages(
            region,
            "describe_spot_price_history",
            InstanceTypes=list(instance_types),
            ProductDescriptions=["Linux/UNIX"],
            StartTime=start,
        ):
            rows.extend(page.get("SpotPriceHistory", []))
        quotes = parse.latest_spot_prices(rows)
        merged = dict(cached[1]) if cached else {}
        merged.update(quotes)
        self._quotes[region] = (now, merged)
        return quotes

    def spot_prices(self, instance_types: Sequence[str] | None = None) -> list[SpotPrice]:
        self._notes = [n for n in self._notes if not n.startswith("spot availability")]
        prices: list[SpotPrice] = []
        for region in self.regions:
            types = list(instance_types) if instance_types else sorted(self.gpu_types(region))
            quotes = self._spot_quotes(region, types, fresh=True)
            scores = self._placement_scores(
                region, sorted({q.instance_type for q in quotes.values()})
            )
            for (zone, instance_type), quote in sorted(quotes.items()):
                score = scores.get((zone, instance_type))
                prices.append(
                    SpotPrice(
                        provider=self.name,
                        region=region,
                        zone=zone,
                        instance_type=instance_type,
                        price_usd_per_hour=quote.price_usd_per_hour,
                        timestamp=quote.timestamp,
                        available=score is None or score >= AVAILABLE_MIN_SCORE,
                    )
                )
        return prices

    def _placement_scores(
        self, region: str, instance_types: Sequence[str]
    ) -> dict[tuple[str, str], int]:
        """(zone, type) → spot placement score; empty (and a note) where the API is not to be had."""
        if not self.placement_scores or not instance_types:
            return {}
        if len(instance_types) > PLACEMENT_SCORE_MAX_TYPES:
            self._notes.append(
                f"spot availability in {region}: not scored for {len(instance_types)} types at once "
                f"(at most {PLACEMENT_SCORE_MAX_TYPES}); every market reads available"
            )
            return {}
        scores: dict[tuple[str, str], int] = {}
        try:
            zone_names = {
                z["ZoneId"]: z["ZoneName"]
                for z in self._call(region, "describe_availability_zones").get(
                    "AvailabilityZones", []
                )
            }
            for instance_type in instance_types:
                answer = self._call(
                    region,
                    "get_spot_placement_scores",
                    InstanceTypes=[instance_type],
                    TargetCapacity=1,
                    SingleAvailabilityZone=True,
                    RegionNames=[region],
                )
                for row in answer.get("SpotPlacementScores", []):
                    zone = zone_names.get(row.get("AvailabilityZoneId", ""))
                    if zone is not None:
                        scores[(zone, instance_type)] = int(row.get("Score", 0))
        except (ProviderError, NotImplementedError) as exc:
            self.placement_scores = False  # asked once per provider: the account's answer stays
            self._notes.append(
                f"spot availability in {region}: GetSpotPlacementScores is not available to this "
                f"account or endpoint ({exc or type(exc).__name__}); every market reads available"
            )
            return {}
        return scores

    def offering_notes(self) -> list[str]:
        return list(self._notes)

    def _price(self, region: str, zone: str | None, instance_type: str, spot: bool) -> float:
        """The rate an instance of that market gets now: its spot price, else the list price."""
        if spot:
            quotes = self._spot_quotes(region, [instance_type])
            here = [
                q.price_usd_per_hour
                for (z, t), q in quotes.items()
                if t == instance_type and (zone is None or z == zone)
            ]
            if here:
                return min(here)
        builtin = {
            (o.region, o.instance_type): o for o in builtin_offerings() if o.provider == NAME
        }
        prices, _ = self._on_demand_prices(region, builtin)
        return prices.get(instance_type, 0.0)

    # -- launching -------------------------------------------------------------

    def _image(self, region: str) -> str:
        if self.image_id:
            return self.image_id
        if region not in self._images:
            try:
                answer = self._call(region, "get_parameter", service="ssm", Name=DEEP_LEARNING_AMI)
            except ProviderError as exc:
                raise ConfigError(
                    f"{self.name}: no AMI to launch in {region}: the Deep Learning AMI's public "
                    f"parameter could not be read ({exc}); set image_id= or "
                    f"{ENV_OPTIONS['image_id']} to an AMI with NVIDIA drivers and Python 3.11+"
                ) from None
            self._images[region] = str(answer["Parameter"]["Value"])
        return self._images[region]

    def _tags(self, request: LaunchRequest, token: str) -> dict[str, str]:
        tags, node = launch_tags(request.tags, request.name, token)
        tags.setdefault("Name", request.name or node or f"spothop-{token}")
        return tags

    def _instance_params(self, request: LaunchRequest, region: str) -> dict[str, Any]:
        params: dict[str, Any] = {
            "ImageId": self._image(region),
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 2,  # containers on the instance reach IMDS too
            },
            "InstanceInitiatedShutdownBehavior": "terminate",
        }
        if self.instance_profile:
            key = "Arn" if self.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: self.instance_profile}
        if self.security_group_ids:
            params["SecurityGroupIds"] = list(self.security_group_ids)
        if self.key_name:
            params["KeyName"] = self.key_name
        return params

    def _user_data(self, request: LaunchRequest) -> str:
        env = {"SPOTHOP_CLOUD": self.name, **request.env}
        return render_user_data(
            request.bootstrap_command, env, install=self.install, image=request.image
        )

    def launch(self, request: LaunchRequest) -> Instance:
        refuse_reservation(self.name, ERROR_CODES.invalid_parameter, request)  # no pools held yet
        region = sdk.check_region(self.name, self._session, request.region)
        user_data = self._user_data(request)  # refuses a credential before any call
        token = request.tags.get(TOKEN_TAG) or new_token()
        tags = self._tags(request, token)
        if request.zone is not None:
            tags[PRICE_TAG] = number_text(
                self._price(region, request.zone, request.instance_type, request.spot)
            )
        params = self._instance_params(request, region) | {
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": token[:64],
            "UserData": user_data,
            "TagSpecifications": _tag_specifications(tags),
        }
        if request.zone is not None:
            params["Placement"] = {"AvailabilityZone": request.zone}
        if request.spot:
            spot_options: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if request.max_price_usd_per_hour is not None:
                spot_options["MaxPrice"] = number_text(request.max_price_usd_per_hour)
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot_options}
        answer = self._call(region, "run_instances", **params)
        raw = answer["Instances"][0]
        instance_id = str(raw["InstanceId"])
        self._region_of[instance_id] = region
        try:
            if PRICE_TAG not in tags:
                zone = raw["Placement"]["AvailabilityZone"]
                price = number_text(self._price(region, zone, request.instance_type, request.spot))
                self._call(
                    region,
                    "create_tags",
                    Resources=[instance_id],
                    Tags=[{"Key": PRICE_TAG, "Value": price}],
                )
                raw = {**raw, "Tags": [*raw.get("Tags", []), {"Key": PRICE_TAG, "Value": price}]}
            return self._instance(raw, region)
        except BaseException:
            self.terminate(instance_id)  # never leave an instance behind after raising
            raise

    def launch_fleet(self, request: FleetRequest) -> FleetResult:
        template = request.template
        refuse_reservation(self.name, ERROR_CODES.invalid_parameter, template)
        region = sdk.check_region(self.name, self._session, template.region)
        user_data = self._user_data(template)
        token = template.tags.get(TOKEN_TAG) or new_token()
        tags = self._tags(template, token)
        data = self._instance_params(template, region) | {
            "UserData": base64.b64encode(user_data.encode("utf-8")).decode("ascii")
        }
        name = f"spothop-{token}"[:128]
        made = self._call(
            region, "create_launch_template", LaunchTemplateName=name, LaunchTemplateData=data
        )
        template_id = made["LaunchTemplate"]["LaunchTemplateId"]
        try:
            answer = self._call(
                region, "create_fleet", **self._fleet_params(request, template_id, tags, token)
            )
        finally:
            self._delete_template(region, template_id)
        ids = [i for group in answer.get("Instances", []) for i in group.get("InstanceIds", [])]
        refused = [
            map_error(self.name, str(e.get("ErrorCode")), str(e.get("ErrorMessage", "")))
            for e in answer.get("Errors", [])
        ]
        for instance_id in ids:
            self._region_of[instance_id] = region
        if len(ids) < request.min_count:
            for instance_id in ids:
                self.terminate(instance_id)
            if refused:
                raise refused[0]
            raise CapacityUnavailable(
                self.name,
                ERROR_CODES.capacity_unavailable,
                f"the fleet started {len(ids)} of the {request.min_count} instances it needed",
            )
        try:
            instances = self._tag_fleet(region, ids, template, tags)
        except BaseException:
            for instance_id in ids:
                self.terminate(instance_id)
            raise
        return FleetResult(instances=instances, refused=refused)

    def _fleet_params(
        self, request: FleetRequest, template_id: str, tags: Mapping[str, str], token: str
    ) -> dict[str, Any]:
        template = request.template
        overrides = []
        for instance_type, zone in request.choices:
            override: dict[str, Any] = {"InstanceType": instance_type}
            if zone is not None:
                override["AvailabilityZone"] = zone
            if template.spot and template.max_price_usd_per_hour is not None:
                override["MaxPrice"] = number_text(template.max_price_usd_per_hour)
            overrides.append(override)
        return {
            "Type": "instant",
            "ClientToken": token[:64],
            "LaunchTemplateConfigs": [
                {
                    "LaunchTemplateSpecification": {
                        "LaunchTemplateId": template_id,
                        "Version": "$Latest",
                    },
                    "Overrides": overrides,
                }
            ],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": request.count,
                "DefaultTargetCapacityType": "spot" if template.spot else "on-demand",
            },
            "SpotOptions": {
                "AllocationStrategy": "price-capacity-optimized",
                "InstanceInterruptionBehavior": "terminate",
            },
            "OnDemandOptions": {"AllocationStrategy": "lowest-price"},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": _tag_list(tags)}],
        }

    def _tag_fleet(
        self, region: str, ids: Sequence[str], template: LaunchRequest, tags: Mapping[str, str]
    ) -> list[Instance]:
        """Give each fleet instance its node (``NODE-i``) and its price tag; return them described."""
        raws = self._describe_raw(region, ids)
        node = tags.get(NODE_TAG)
        instances = []
        for index, raw in enumerate(sorted(raws, key=lambda r: str(r["InstanceId"]))):
            zone = raw["Placement"]["AvailabilityZone"]
            extra = {
                PRICE_TAG: number_text(
                    self._price(region, zone, raw["InstanceType"], template.spot)
                )
            }
            if node:
                extra[NODE_TAG] = f"{node}-{index}"
                extra["Name"] = f"{node}-{index}"
            self._call(region, "create_tags", Resources=[raw["InstanceId"]], Tags=_tag_list(extra))
            present = {t["Key"]: t["Value"] for t in raw.get("Tags", [])} | extra
            instances.append(self._instance({**raw, "Tags": _tag_list(present)}, region))
        return instances

    def _delete_template(self, region: str, template_id: str) -> None:
        try:
            self._call(region, "delete_launch_template", LaunchTemplateId=template_id)
        except ProviderError as exc:  # a leftover template costs nothing; say so and go on
            log.warning("%s: launch template %s not deleted: %s", self.name, template_id, exc)

    # -- describing and ending -------------------------------------------------

    def _describe_raw(self, region: str, ids: Sequence[str]) -> list[dict[str, Any]]:
        answer = self._call(region, "describe_instances", InstanceIds=list(ids))
        return [i for r in answer.get("Reservations", []) for i in r.get("Instances", [])]

    def _find(self, instance_id: str) -> tuple[str, dict[str, Any]]:
        """(region, raw instance) of an id; InstanceNotFound with EC2's code if no region has it."""
        regions = [self._region_of[instance_id]] if instance_id in self._region_of else []
        regions += [r for r in self.regions if r not in regions]
        missing: ProviderError | None = None
        for region in regions:
            try:
                found = self._describe_raw(region, [instance_id])
            except InstanceNotFound as exc:
                missing = exc
                continue
            if found:
                self._region_of[instance_id] = region
                return region, found[0]
        raise missing or InstanceNotFound(
            self.name,
            ERROR_CODES.instance_not_found,
            f"The instance ID '{instance_id}' does not exist",
        )

    def describe(self, instance_id: str) -> Instance:
        region, raw = self._find(instance_id)
        return self._instance(raw, region, self._notices(region, [raw]))

    def list_instances(self) -> list[Instance]:
        return self.find_instances()

    def find_instances(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        """Every instance spothop launched (it has ``spothop-token``), ended or not, that has ``tags``.

        Searched: the provider's regions, and any other region this provider launched into.
        """
        filters = [{"Name": "tag-key", "Values": [TOKEN_TAG]}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in (tags or {}).items()]
        found = []
        launched_elsewhere = [
            r for r in dict.fromkeys(self._region_of.values()) if r not in self.regions
        ]
        for region in [*self.regions, *launched_elsewhere]:
            raws = []
            for page in self._pages(region, "describe_instances", Filters=filters):
                for reservation in page.get("Reservations", []):
                    raws.extend(reservation.get("Instances", []))
            notices = self._notices(region, raws)
            for raw in raws:
                self._region_of[str(raw["InstanceId"])] = region
                found.append(self._instance(raw, region, notices))
        return found

    def _notices(self, region: str, raws: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """spot request id → when EC2 marked it for interruption, for the live spot instances given.

        One ``DescribeSpotInstanceRequests`` call per 100 requests. This is the
        API's view of the interruption notice, for a controller whose agent is
        silent; a failed call only means no notice is seen here (the agent's
        IMDS watcher still sees it).
        """
        ids = [
            str(r["SpotInstanceRequestId"])
            for r in raws
            if r.get("SpotInstanceRequestId") and r["State"]["Name"] in ("pending", "running")
        ]
        marked: dict[str, float] = {}
        for start in range(0, len(ids), FILTER_VALUES_MAX):
            try:
                answer = self._call(
                    region,
                    "describe_spot_instance_requests",
                    SpotInstanceRequestIds=ids[start : start + FILTER_VALUES_MAX],
                )
            except (ProviderError, NotImplementedError) as exc:
                log.debug("%s: spot request status not read in %s: %s", self.name, region, exc)
                continue
            for row in answer.get("SpotInstanceRequests", []):
                status = row.get("Status") or {}
                if status.get("Code") in _INTERRUPTION_CODES:
                    when = status.get("UpdateTime")
                    marked[str(row["SpotInstanceRequestId"])] = (
                        _seconds(when) if when is not None else self.clock.now()
                    )
        return marked

    def terminate(self, instance_id: str) -> None:
        try:
            region, raw = self._find(instance_id)
            if raw["State"]["Name"] in _ENDED_STATES:
                return
            self._call(
                region,
                "create_tags",
                Resources=[instance_id],
                Tags=[{"Key": ENDED_TAG, "Value": number_text(self.clock.now())}],
            )
            self._call(region, "terminate_instances", InstanceIds=[instance_id])
        except InstanceNotFound:
            return

    def _instance(
        self, raw: Mapping[str, Any], region: str, notices: Mapping[str, float] | None = None
    ) -> Instance:
        tags = {str(t["Key"]): str(t["Value"]) for t in raw.get("Tags", [])}
        state_name = raw["State"]["Name"]
        reason = str((raw.get("StateReason") or {}).get("Code", ""))
        spot = raw.get("InstanceLifecycle") == "spot"
        zone = (raw.get("Placement") or {}).get("AvailabilityZone")
        launched_at = _seconds(raw["LaunchTime"])
        ended_at = None
        if state_name in _ENDED_STATES:
            state = (
                InstanceState.PREEMPTED
                if reason in _PREEMPTION_REASONS
                else InstanceState.FAILED
                if reason in _FAILURE_REASONS
                else InstanceState.TERMINATED
            )
            ended_at = _ended_at(tags, str(raw.get("StateTransitionReason") or ""), launched_at)
        else:
            state = InstanceState.PENDING if state_name == "pending" else InstanceState.RUNNING
        notice_time = (notices or {}).get(str(raw.get("SpotInstanceRequestId") or ""))
        termination_time = None
        if notice_time is not None:
            termination_time = notice_time + NOTICE_LEAD_TIME_S
            if state is not InstanceState.PENDING and ended_at is None:
                state = InstanceState.NOTICED
        if PRICE_TAG in tags:
            price = float(tags[PRICE_TAG])
        else:
            price = self._price(region, zone, str(raw["InstanceType"]), spot)
        end = ended_at if ended_at is not None else self.clock.now()
        billed = max(0.0, end - launched_at)
        return Instance(
            instance_id=str(raw["InstanceId"]),
            provider=self.name,
            region=region,
            zone=zone,
            instance_type=str(raw["InstanceType"]),
            spot=spot,
            state=state,
            launched_at=launched_at,
            price_usd_per_hour=price,
            ended_at=ended_at,
            billed_seconds=billed,
            cost_microusd=cost_microusd(price, billed),
            notice_time=notice_time,
            termination_time=termination_time,
            name=tags.get("Name"),
            tags=tags,
        )


# -- the family: one name, options from the call or the environment ---------------


class AwsFamily(OneNameFamily):
    """The registry's family for EC2: one provider name, ``aws``."""

    provider_name = NAME
    adapter = "EC2"
    provider_class = AwsProvider
    taken = frozenset(
        {
            "regions",
            "profile",
            "session",
            "endpoint_url",
            "image_id",
            "instance_profile",
            "security_group_ids",
            "key_name",
            "install",
            "clock",
            "placement_scores",
            "pricing",
            "page_size",
        }
    )
    env_options = ENV_OPTIONS


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _tag_specifications(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": _tag_list(tags)} for kind in ("instance", "volume")]


def _seconds(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _ended_at(tags: Mapping[str, str], transition: str, launched_at: float) -> float:
    """When an ended instance stopped costing: spothop's end tag, else EC2's transition time."""
    if ENDED_TAG in tags:
        try:
            return max(launched_at, float(tags[ENDED_TAG]))
        except ValueError:
            pass
    match = _REASON_TIME.search(transition)
    if match:
        stamp = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.UTC)
        return max(launched_at, stamp.timestamp())
    return launched_at
