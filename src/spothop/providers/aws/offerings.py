"""EC2's answers about instance types and prices, turned into spothop's offerings.

Pure functions over the API's dicts, so they are tested on documented answers
without a cloud:

- :func:`gpu_type` reads ``DescribeInstanceTypes``' ``GpuInfo`` (name,
  count, memory per GPU) and resolves the GPU model spothop knows (memory
  settles a family name such as ``A100``); a type without GPUs, or with GPUs
  spothop has no model of, is ``None``.
- :func:`offering` builds one :class:`~spothop.resources.offering.Offering`
  per (type, zone), its specs from the API, its interconnect from the built-in
  catalog where it has the type (else from the GPU count and family).
- :func:`on_demand_prices` reads the Pricing API's ``GetProducts`` price list
  (JSON strings, one per product) into USD per instance-hour per type.
- :func:`latest_spot_prices` keeps the newest ``DescribeSpotPriceHistory``
  row of each (zone, type).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spothop.errors import UnknownGpuError
from spothop.resources.gpus import GpuModel, resolve_gpu
from spothop.resources.offering import Interconnect, Offering

# Instance-type patterns of the EC2 families that carry GPUs (g: graphics and inference,
# p: training); GpuInfo still decides, so a pattern that matches a type without GPUs costs nothing.
GPU_TYPE_PATTERNS = ("g*", "p*")
SPOT_PRODUCTS = frozenset({"Linux/UNIX", "Linux/UNIX (Amazon VPC)"})
MIB_PER_GIB = 1024
# Families whose multi-GPU sizes are NVSwitch (HGX) or NVLink boards; the rest are PCIe.
_NVSWITCH_FAMILIES = ("p4", "p5", "p6")
_NVLINK_FAMILIES = ("p3",)
_GIGABIT = re.compile(r"(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*Gigabit", re.IGNORECASE)


@dataclass(frozen=True)
class GpuType:
    """One EC2 instance type with GPUs: what the catalog needs of ``DescribeInstanceTypes``."""

    instance_type: str
    gpu: GpuModel
    gpu_count: int
    vcpus: float
    memory_gib: float
    local_disk_gib: float | None
    network_bandwidth_gbps: float | None
    spot: bool  # SupportedUsageClasses has "spot"


def gpu_type(raw: Mapping[str, Any]) -> GpuType | None:
    """The GPU type of one ``InstanceTypes`` entry, or None (no GPUs, or GPUs spothop has no model of)."""
    gpus = (raw.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    first = gpus[0]
    count = sum(int(g.get("Count") or 0) for g in gpus)
    memory_mib = (first.get("MemoryInfo") or {}).get("SizeInMiB")
    try:
        model = resolve_gpu(
            str(first.get("Name") or ""), memory_mib / MIB_PER_GIB if memory_mib else None
        )
    except UnknownGpuError:
        return None
    if count < 1:
        return None
    storage = raw.get("InstanceStorageInfo") or {}
    network = (raw.get("NetworkInfo") or {}).get("NetworkPerformance")
    return GpuType(
        instance_type=str(raw["InstanceType"]),
        gpu=model,
        gpu_count=count,
        vcpus=float((raw.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
        memory_gib=float((raw.get("MemoryInfo") or {}).get("SizeInMiB") or 0) / MIB_PER_GIB,
        local_disk_gib=float(storage["TotalSizeInGB"]) if storage.get("TotalSizeInGB") else None,
        network_bandwidth_gbps=network_gbps(network),
        spot="spot" in (raw.get("SupportedUsageClasses") or []),
    )


def network_gbps(text: str | None) -> float | None:
    """``"Up to 25 Gigabit"`` → 25, ``"8x 100 Gigabit"`` → 800; ``"Low"`` or nothing → None."""
    match = _GIGABIT.search(text or "")
    if match is None:
        return None
    times = int(match.group(1) or 1)
    return times * float(match.group(2))


def interconnect(instance_type: str, gpu_count: int, known: Interconnect | None) -> Interconnect:
    """The built-in catalog's value where it has the type; else by GPU count and family."""
    if known is not None:
        return known
    if gpu_count == 1:
        return Interconnect.NONE
    family = instance_type.split(".", 1)[0]
    if family.startswith(_NVSWITCH_FAMILIES):
        return Interconnect.NVSWITCH
    if family.startswith(_NVLINK_FAMILIES):
        return Interconnect.NVLINK
    return Interconnect.PCIE


def offering(
    provider: str,
    region: str,
    zone: str,
    kind: GpuType,
    *,
    on_demand_usd_per_hour: float | None,
    spot_usd_per_hour: float | None,
    known_interconnect: Interconnect | None,
    price_date: dt.date,
    source: str,
) -> Offering | None:
    """One offering, or None where there is no price at all (neither market known)."""
    if on_demand_usd_per_hour is None and spot_usd_per_hour is None:
        return None
    if kind.vcpus <= 0 or kind.memory_gib <= 0:
        return None
    return Offering(
        provider=provider,
        region=region,
        zone=zone,
        instance_type=kind.instance_type,
        gpu=kind.gpu.name,
        gpu_count=kind.gpu_count,
        vcpus=kind.vcpus,
        memory_gib=kind.memory_gib,
        local_disk_gib=kind.local_disk_gib,
        network_bandwidth_gbps=kind.network_bandwidth_gbps,
        interconnect=interconnect(kind.instance_type, kind.gpu_count, known_interconnect),
        currency="USD",
        on_demand_price_usd_per_hour=on_demand_usd_per_hour,
        spot_price_usd_per_hour=spot_usd_per_hour if kind.spot else None,
        on_demand_price_original=on_demand_usd_per_hour,
        spot_price_original=spot_usd_per_hour if kind.spot else None,
        price_date=price_date,
        source=source,
    )


def on_demand_prices(price_list: Iterable[str]) -> dict[str, float]:
    """instance type → USD per hour, from ``GetProducts``' ``PriceList`` (aws_v1 JSON strings)."""
    prices: dict[str, float] = {}
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        attributes = (product.get("product") or {}).get("attributes") or {}
        instance_type = attributes.get("instanceType")
        if not instance_type:
            continue
        for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = float((dimension.get("pricePerUnit") or {}).get("USD") or 0)
                if usd > 0 and str(dimension.get("unit", "Hrs")).lower().startswith("hr"):
                    prices[instance_type] = usd
    return prices


@dataclass(frozen=True)
class SpotQuote:
    zone: str
    instance_type: str
    price_usd_per_hour: float
    timestamp: float


def latest_spot_prices(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], SpotQuote]:
    """(zone, type) → the newest Linux quote of ``SpotPriceHistory`` rows."""
    latest: dict[tuple[str, str], SpotQuote] = {}
    for row in rows:
        if row.get("ProductDescription", "Linux/UNIX") not in SPOT_PRODUCTS:
            continue
        stamp = row.get("Timestamp")
        seconds = stamp.timestamp() if isinstance(stamp, dt.datetime) else float(stamp or 0)
        quote = SpotQuote(
            zone=str(row["AvailabilityZone"]),
            instance_type=str(row["InstanceType"]),
            price_usd_per_hour=float(row["SpotPrice"]),
            timestamp=seconds,
        )
        key = (quote.zone, quote.instance_type)
        if quote.price_usd_per_hour > 0 and (key not in latest or latest[key].timestamp <= seconds):
            latest[key] = quote
    return latest
