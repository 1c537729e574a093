"""What EC2 sells and at what price: offerings, spot prices, and the rate an instance gets.

:class:`Ec2Prices` is the second floor of
:class:`~spothop.providers.aws.provider.AwsProvider` (on :class:`.calls.Ec2Calls`);
``AwsProvider.__init__`` sets the attributes it declares. The answers are
read by the pure functions of :mod:`.offerings`.

- ``list_offerings``: ``DescribeInstanceTypes`` (the GPU families, cached per
  region), ``DescribeInstanceTypeOfferings`` (which zones sell each type),
  on-demand prices from the Pricing API's ``GetProducts`` (cached per region
  once it answered; where it cannot be reached, is switched off or lists no
  GPU instance, the built-in catalog's prices stand in and a note says so)
  and spot prices from ``DescribeSpotPriceHistory``.
- ``spot_prices``: the newest Linux price per zone and type; ``available``
  from ``GetSpotPlacementScores`` (a score under :data:`AVAILABLE_MIN_SCORE`
  is not available), asked for at most :data:`PLACEMENT_SCORE_MAX_TYPES`
  types at once. An account or endpoint that may not call it is asked once per
  provider: from then on every market reads available, and a note says why.
- ``offering_notes``: the notes of the last ``list_offerings`` and
  ``spot_prices`` (one line each), for a person reading the offerings.
- ``_price``: the rate a new instance gets, the lowest spot quote of its zone
  (quotes at most :data:`SPOT_QUOTE_TTL_S` old) for spot, else the on-demand
  list price (0.0 where none is known).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from spothop.errors import ProviderError
from spothop.providers.aws import offerings as parse
from spothop.providers.aws.calls import FILTER_VALUES_MAX, NAME, Ec2Calls
from spothop.providers.base import SpotPrice
from spothop.resources.catalog import builtin_offerings
from spothop.resources.offering import Offering

AVAILABLE_MIN_SCORE = 3  # GetSpotPlacementScores: 1 (unlikely to be filled) … 10 (highly likely)
PLACEMENT_SCORE_MAX_TYPES = 10  # one call per type: asked only for this many types at once
SPOT_QUOTE_TTL_S = 300.0  # a launch's spot price comes from quotes at most this old
PRICING_REGION = "us-east-1"  # the Pricing API's endpoint region


class Ec2Prices(Ec2Calls):
    """Offerings and prices of EC2 in the provider's regions. See the module docstring."""

    placement_scores: bool
    pricing: bool
    _types: dict[str, dict[str, parse.GpuType]]
    _on_demand: dict[str, dict[str, float]]
    _quotes: dict[str, tuple[float, dict[tuple[str, str], parse.SpotQuote]]]
    _notes: list[str]

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
