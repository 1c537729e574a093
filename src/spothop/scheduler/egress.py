"""What it costs to bring a job's data to a candidate: per-provider egress prices, as dated data.

The prices live in ``data/egress.yaml`` (USD per GiB out to the internet and
between regions of one cloud, each with its source; ``as_of`` says when they
were read). Rules, for moving ``data_gib`` from ``(provider, region)`` to a
candidate's ``(provider, region)``:

- same provider, same region: free;
- same provider, another region: the source's ``inter_region_usd_per_gib``;
- another provider: the source's ``internet_usd_per_gib`` (ingress is free);
- a source provider missing from the table is looked up by its family, the
  name before its last ``-`` (a simulated cloud costs what the cloud it
  imitates costs), then priced at the table's ``default``.

The sender pays; nothing here knows which cloud is which beyond the table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources as importlib_resources
from typing import Any

import yaml

from spothop.errors import ConfigError


@dataclass(frozen=True)
class EgressPrice:
    internet_usd_per_gib: float
    inter_region_usd_per_gib: float


@dataclass(frozen=True)
class EgressTable:
    """Egress prices by provider name (see the module rules)."""

    as_of: dt.date
    default: EgressPrice
    providers: Mapping[str, EgressPrice]

    def price_for(self, provider: str) -> EgressPrice:
        known = self.providers.get(provider)
        if known is None and "-" in provider:
            known = self.providers.get(provider.rsplit("-", 1)[0])
        return self.default if known is None else known

    def usd_per_gib(self, source: tuple[str, str], destination: tuple[str, str]) -> float:
        """USD per GiB moved from ``source`` to ``destination``, each ``(provider, region)``."""
        if source == destination:
            return 0.0
        price = self.price_for(source[0])
        if source[0] == destination[0]:
            return price.inter_region_usd_per_gib
        return price.internet_usd_per_gib

    def cost_usd(
        self, data_gib: float, source: tuple[str, str] | None, destination: tuple[str, str]
    ) -> float:
        """USD to move ``data_gib`` to ``destination``; 0 when there is nothing or nowhere to move from."""
        if source is None or data_gib <= 0:
            return 0.0
        return data_gib * self.usd_per_gib(source, destination)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> EgressTable:
        try:
            as_of = raw["as_of"]
            return cls(
                as_of=as_of if isinstance(as_of, dt.date) else dt.date.fromisoformat(str(as_of)),
                default=EgressPrice(**raw["default"]),
                providers={
                    str(name): EgressPrice(**fields)
                    for name, fields in (raw.get("providers") or {}).items()
                },
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"egress price table is malformed ({exc}); it needs as_of, default and "
                "providers: {name: {internet_usd_per_gib, inter_region_usd_per_gib}}"
            ) from None


@cache
def egress_table() -> EgressTable:
    """The built-in table, loaded once from ``data/egress.yaml``."""
    text = (
        importlib_resources.files("spothop.scheduler")
        .joinpath("data/egress.yaml")
        .read_text(encoding="utf-8")
    )
    return EgressTable.from_mapping(yaml.safe_load(text))
