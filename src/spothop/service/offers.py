"""The catalog's offerings: ``spothop offers`` and ``GET /v1/offers``.

:func:`find_offers` answers an :class:`~spothop.resources.catalog.OfferQuery`; the CLI's
remote mode sends that query as the server's parameters (:func:`offer_query_params`) and the
server reads it back (:func:`offer_query_from_params`), so both ask the same question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.resources.catalog import Catalog, OfferQuery
    from spothop.resources.offering import Offering


@dataclass(frozen=True)
class OfferList:
    """Offerings, cheapest first, priced at the query's market (``spot``): ``to_dict()`` is
    ``GET /v1/offers``' ``{"offers": …}``, :meth:`to_list` what ``offers --json`` prints."""

    offerings: tuple[Offering, ...]
    spot: bool

    def to_list(self) -> list[dict[str, Any]]:
        return [o.to_dict(self.spot) for o in self.offerings]

    def to_dict(self) -> dict[str, Any]:
        return {"offers": self.to_list()}


def find_offers(query: OfferQuery, catalog: Catalog | None = None) -> OfferList:
    """The offerings of ``catalog`` (none: the catalog loaded now) matching ``query``, cheapest
    first. A GPU, provider or region the catalog does not know is a
    :class:`~spothop.errors.ConfigError` naming it."""
    from spothop.resources.catalog import check_names, load_catalog

    if catalog is None:
        catalog = load_catalog()
    check_names(query, catalog)
    return OfferList(tuple(catalog.query(query)), query.spot)


OFFER_QUERY_PARAMS = (
    "gpu",
    "count",
    "min_gpu_memory_gib",
    "min_tflops",
    "interconnect",
    "providers",
    "regions",
    "spot",
    "max_usd_per_gpu_hour",
    "sort",
    "limit",
)


def offer_query_params(query: OfferQuery) -> dict[str, Any]:
    """``query`` as the server's ``GET /v1/offers`` parameters (the fields that are set; lists
    comma-joined); :func:`offer_query_from_params` reads them back."""
    out: dict[str, Any] = {}
    for name in OFFER_QUERY_PARAMS:
        value = getattr(query, name)
        if value is None or value == ():
            continue
        if isinstance(value, tuple):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out[name] = value
    return out


def offer_query_from_params(params: Mapping[str, str]) -> OfferQuery:
    """The :class:`OfferQuery` of ``GET /v1/offers``' parameters (the contract's
    ``max_price_usd_per_hour`` is a synonym of ``max_usd_per_gpu_hour``); a bad value is a
    :class:`~spothop.errors.ConfigError` naming it."""
    from spothop.errors import ConfigError
    from spothop.resources.catalog import OfferQuery

    def number(name: str, kind: type) -> Any:
        raw = params.get(name)
        if raw is None or raw == "":
            return None
        try:
            return kind(raw)
        except ValueError:
            raise ConfigError(f"{name}={raw!r}: expected a {kind.__name__}") from None

    spot = str(params.get("spot", "true")).lower()
    if spot not in ("true", "false", "1", "0"):
        raise ConfigError(f"spot={spot!r}: expected true or false")
    price = number("max_usd_per_gpu_hour", float)
    if price is None:
        price = number("max_price_usd_per_hour", float)
    return OfferQuery(
        gpu=params.get("gpu") or None,
        count=number("count", int),
        min_gpu_memory_gib=number("min_gpu_memory_gib", float),
        min_tflops=number("min_tflops", float),
        interconnect=params.get("interconnect") or None,
        providers=tuple(p for p in str(params.get("providers", "")).split(",") if p),
        regions=tuple(r for r in str(params.get("regions", "")).split(",") if r),
        spot=spot in ("true", "1"),
        max_usd_per_gpu_hour=price,
        sort=params.get("sort") or "price",
        limit=number("limit", int),
    )
