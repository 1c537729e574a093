"""A market's identity: where one instance type can be rented.

One :class:`MarketId` names a market everywhere in spothop — the catalog
(``Offering.market_id``), price history, interruption records, reliability
scores — so the same market is the same key in all of them.

**The zone convention: ``""``, never ``None``.** ``zone`` is the empty string
when a cloud sells or prices a whole region alike (most GCP prices, Azure
low-priority). Why the empty string rather than ``None``:

- a ``MarketId`` is a key: it is hashed, compared and *sorted* (reports list
  markets in order), and ``None`` does not order against a string;
- the market tables keep ``zone`` in SQL unique keys, where two NULLs are
  distinct, so ``None`` would let the same regional point be stored twice.

Places that do mean "no zone chosen yet" (``Offering.zone``, a launch
request letting the provider pick) keep ``None``; they convert at the edge
with :meth:`MarketId.of`, and ``MarketId`` itself refuses ``None``.

Names are kept exactly as the cloud spells them; nothing here parses them
(a zone's region comes from whoever knows the cloud's naming: its price
source or its provider).
"""

from __future__ import annotations

from dataclasses import dataclass

REGIONAL = ""  # the zone of a market priced and sold per region


@dataclass(frozen=True, order=True)
class MarketId:
    """One place to rent one instance type: provider, region, zone (``""``: regional), type.

    Raises :class:`ValueError` for a ``None`` or non-string field and for an
    empty provider. An empty region or instance type means whoever reported
    the market did not know it (an agent on an instance without a metadata
    service still records its preemption); such a market is kept apart from
    every named one.
    """

    provider: str
    region: str
    zone: str
    instance_type: str

    def __post_init__(self) -> None:
        for name in ("provider", "region", "zone", "instance_type"):
            value = getattr(self, name)
            if not isinstance(value, str):
                hint = (
                    ' (a regional market\'s zone is "", not None; MarketId.of converts)'
                    if value is None
                    else ""
                )
                raise ValueError(f"MarketId.{name} must be a string, got {value!r}{hint}")
        if not self.provider:
            raise ValueError("MarketId.provider must not be empty")

    @classmethod
    def of(cls, provider: str, region: str, zone: str | None, instance_type: str) -> MarketId:
        """A market from a place whose zone may be ``None`` (an offering, a live price): ``None`` → ``""``."""
        return cls(provider, region, REGIONAL if zone is None else zone, instance_type)

    @property
    def regional(self) -> bool:
        """True when the market covers a whole region (no zone)."""
        return self.zone == REGIONAL

    @property
    def location(self) -> str:
        """The zone, or the region for a regional market."""
        return self.zone or self.region

    def to_dict(self) -> dict[str, str]:
        """``{"provider", "region", "zone", "instance_type"}``, the JSON form."""
        return {
            "provider": self.provider,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
        }

    @property
    def slug(self) -> str:
        """``provider/location/instance_type``, for logs and tables."""
        return f"{self.provider}/{self.location}/{self.instance_type}"
