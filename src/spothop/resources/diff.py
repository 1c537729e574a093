"""Catalog diffs: what changed between two versions of a catalog, as typed events.

Capability discovery runs daily: each cloud's live offering list is compared
with the cached catalog and the changes are applied in place, without a
restart. :func:`diff_catalogs` produces the events; :func:`apply_changes`
applies them; ``spothop catalog diff OLD NEW`` prints them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from spothop.resources.catalog import Catalog
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering

# The fields that describe the hardware; a change in any is a SpecChanged event.
SPEC_FIELDS = (
    "gpu",
    "gpu_count",
    "vcpus",
    "memory_gib",
    "local_disk_gib",
    "network_bandwidth_gbps",
    "interconnect",
)

Market = Literal["on_demand", "spot"]


class _SerialisedChange:
    """Every change serialises itself: :func:`change_json`, the one place its fields are named."""

    def to_dict(self) -> dict[str, Any]:
        return change_json(self)  # type: ignore[arg-type]  # only the CatalogChange classes inherit this


@dataclass(frozen=True)
class OfferingAdded(_SerialisedChange):
    offering: Offering
    kind: str = "added"

    @property
    def market_id(self) -> MarketId:
        return self.offering.market_id

    def describe(self) -> str:
        return f"+ {_name(self.offering)}: new offering, {self.offering.gpu_count}× {self.offering.gpu}"


@dataclass(frozen=True)
class OfferingRemoved(_SerialisedChange):
    offering: Offering
    kind: str = "removed"

    @property
    def market_id(self) -> MarketId:
        return self.offering.market_id

    def describe(self) -> str:
        return f"- {_name(self.offering)}: no longer offered"


@dataclass(frozen=True)
class PriceChanged(_SerialisedChange):
    """A price moved; ``None`` on one side means the market appeared or went away."""

    offering: Offering  # the new version
    market: Market
    old_usd_per_hour: float | None
    new_usd_per_hour: float | None
    kind: str = "price_changed"
    # The same prices in the cloud's own currency (``offering.currency``), as its list shows them.
    old_original: float | None = None
    new_original: float | None = None

    @property
    def market_id(self) -> MarketId:
        return self.offering.market_id

    @property
    def change_pct(self) -> float | None:
        if not self.old_usd_per_hour or self.new_usd_per_hour is None:
            return None
        return 100.0 * (self.new_usd_per_hour - self.old_usd_per_hour) / self.old_usd_per_hour

    def describe(self) -> str:
        market = self.market.replace("_", "-")
        if self.old_usd_per_hour is None:
            return f"~ {_name(self.offering)}: {market} market opened at {self.new_usd_per_hour:.4f} USD/h"
        if self.new_usd_per_hour is None:
            return f"~ {_name(self.offering)}: {market} market closed (was {self.old_usd_per_hour:.4f} USD/h)"
        text = (
            f"~ {_name(self.offering)}: {market} {self.old_usd_per_hour:.4f} → "
            f"{self.new_usd_per_hour:.4f} USD/h ({self.change_pct:+.1f} %)"
        )
        currency = self.offering.currency
        if currency != "USD" and self.old_original is not None and self.new_original is not None:
            text += f"; {currency} {self.old_original:g} → {self.new_original:g}"
        return text


@dataclass(frozen=True)
class SpecChanged(_SerialisedChange):
    offering: Offering  # the new version
    field: str
    old: Any
    new: Any
    kind: str = "spec_changed"

    @property
    def market_id(self) -> MarketId:
        return self.offering.market_id

    def describe(self) -> str:
        return f"! {_name(self.offering)}: {self.field} {self.old} → {self.new}"


CatalogChange = OfferingAdded | OfferingRemoved | PriceChanged | SpecChanged


def _name(o: Offering) -> str:
    return f"{o.provider} {o.location} {o.instance_type}"


def diff_catalogs(
    old: Iterable[Offering], new: Iterable[Offering], min_price_change_pct: float = 0.0
) -> list[CatalogChange]:
    """Every change from ``old`` to ``new``, in a stable order (by offering key).

    Price moves smaller than ``min_price_change_pct`` (in percent of the old
    price) are ignored; spot prices wobble hourly and most callers care about
    real moves. A market opening or closing always counts.
    """
    before = {o.market_id: o for o in old}
    after = {o.market_id: o for o in new}
    changes: list[CatalogChange] = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if a is None and b is not None:
            changes.append(OfferingAdded(b))
        elif b is None and a is not None:
            changes.append(OfferingRemoved(a))
        elif a is not None and b is not None:
            changes.extend(_spec_changes(a, b))
            changes.extend(_price_changes(a, b, min_price_change_pct))
    return changes


def _spec_changes(a: Offering, b: Offering) -> list[CatalogChange]:
    out: list[CatalogChange] = []
    for name in SPEC_FIELDS:
        old, new = getattr(a, name), getattr(b, name)
        if old != new:
            out.append(SpecChanged(b, name, getattr(old, "value", old), getattr(new, "value", new)))
    return out


def _price_changes(a: Offering, b: Offering, min_pct: float) -> list[CatalogChange]:
    out: list[CatalogChange] = []
    pairs: Sequence[tuple[Market, float | None, float | None, float | None, float | None]] = (
        (
            "on_demand",
            a.on_demand_price_usd_per_hour,
            b.on_demand_price_usd_per_hour,
            a.on_demand_price_original,
            b.on_demand_price_original,
        ),
        (
            "spot",
            a.spot_price_usd_per_hour,
            b.spot_price_usd_per_hour,
            a.spot_price_original,
            b.spot_price_original,
        ),
    )
    for market, old, new, old_original, new_original in pairs:
        if old == new:
            continue
        same_currency = a.currency == b.currency
        change = PriceChanged(
            b,
            market,
            old,
            new,
            old_original=old_original if same_currency else None,
            new_original=new_original if same_currency else None,
        )
        pct = change.change_pct
        if pct is not None and abs(pct) < min_pct:
            continue
        out.append(change)
    return out


def apply_changes(catalog: Catalog, changes: Iterable[CatalogChange]) -> Catalog:
    """A new catalog with ``changes`` applied; ``catalog`` itself is left as it was.

    Applying ``diff_catalogs(old, new)`` to ``old`` gives ``new`` (except for
    price moves the diff chose to ignore).
    """
    by_key = {o.market_id: o for o in catalog}
    for change in changes:
        if isinstance(change, OfferingRemoved):
            by_key.pop(change.market_id, None)
        else:
            by_key[change.market_id] = _merge(by_key.get(change.market_id), change)
    return Catalog(by_key.values())


def _merge(current: Offering | None, change: CatalogChange) -> Offering:
    if current is None or isinstance(change, OfferingAdded):
        return change.offering
    if isinstance(change, PriceChanged):
        column = (
            "on_demand_price_usd_per_hour"
            if change.market == "on_demand"
            else "spot_price_usd_per_hour"
        )
        original = (
            "on_demand_price_original" if change.market == "on_demand" else "spot_price_original"
        )
        return current.model_copy(
            update={column: change.new_usd_per_hour, original: getattr(change.offering, original)}
        )
    if isinstance(change, SpecChanged):
        return current.model_copy(update={change.field: getattr(change.offering, change.field)})
    return change.offering


def change_json(change: CatalogChange) -> dict[str, Any]:
    """A change as a JSON-ready dict (the CLI's ``--json``)."""
    o = change.offering
    data: dict[str, Any] = {
        "kind": change.kind,
        "provider": o.provider,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "gpu": o.gpu,
        "gpu_count": o.gpu_count,
        "currency": o.currency,
    }
    if isinstance(change, OfferingAdded | OfferingRemoved):
        data |= {
            "on_demand_usd_per_hour": o.on_demand_price_usd_per_hour,
            "spot_usd_per_hour": o.spot_price_usd_per_hour,
        }
    if isinstance(change, PriceChanged):
        data |= {
            "market": change.market,
            "old_usd_per_hour": change.old_usd_per_hour,
            "new_usd_per_hour": change.new_usd_per_hour,
            "change_pct": change.change_pct,
            "old_original": change.old_original,
            "new_original": change.new_original,
        }
    elif isinstance(change, SpecChanged):
        data |= {"field": change.field, "old": change.old, "new": change.new}
    return data
