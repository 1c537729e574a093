"""What a catalog holds per provider: counts, GPUs, price dates, where the rows came from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from spothop.resources.offering import Offering

BUILTIN_SOURCE_PREFIX = "builtin:"  # Offering.source of a row shipped in the package


@dataclass(frozen=True)
class ProviderSummary:
    provider: str
    offerings: int
    with_spot: int  # offerings with a spot market
    regions: int
    gpus: tuple[str, ...]
    oldest_price: str  # ISO date of the oldest price
    newest_price: str
    sources: tuple[str, ...]  # "builtin" and/or "imported"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gpus": list(self.gpus), "sources": list(self.sources)}


def summarise(offerings: Iterable[Offering]) -> list[ProviderSummary]:
    """One summary per provider, by provider name."""
    groups: dict[str, list[Offering]] = defaultdict(list)
    for o in offerings:
        groups[o.provider].append(o)
    out = []
    for name in sorted(groups):
        items = groups[name]
        dates = sorted(o.price_date for o in items)
        out.append(
            ProviderSummary(
                provider=name,
                offerings=len(items),
                with_spot=sum(o.spot_price_usd_per_hour is not None for o in items),
                regions=len({o.region for o in items}),
                gpus=tuple(sorted({o.gpu for o in items})),
                oldest_price=dates[0].isoformat(),
                newest_price=dates[-1].isoformat(),
                sources=tuple(
                    sorted(
                        {
                            "builtin" if o.source.startswith(BUILTIN_SOURCE_PREFIX) else "imported"
                            for o in items
                        }
                    )
                ),
            )
        )
    return out
