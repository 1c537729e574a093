"""Live spot prices that cannot be true are taken as missing, with a note, and never ranked.

A provider's spot price is judged against the catalog: per GPU, it may not fall below
:data:`IMPLAUSIBLE_PRICE_FRACTION` of the same GPU model's lowest catalog price per GPU (the
on-demand or the catalog's spot price of any offering with that GPU, any provider). A price that
is not finite, or not above zero, cannot be true either. Such a price is recorded as missing
(NaN in the view's live column), so the market is judged on its catalog spot price as one nobody
reported on, and each provider's refusals are said in one note (``plan`` prints them).

Why: an imitation of a cloud's API answers any price (moto's EC2 gives every spot market
USD 0.00001/h), and a price feed can break; taken at face value such a price ranks first
everywhere and the controller launches on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from spothop.resources.offering import Offering

log = logging.getLogger(__name__)

# Spot discounts on the large clouds reach about 90 % of on-demand at most, and the catalog's spot
# prices are already discounted: a live price per GPU below a tenth of the cheapest catalog price
# per GPU for that GPU would be a further 90 % off the cheapest known, which no market shows.
IMPLAUSIBLE_PRICE_FRACTION = 0.1


class OfferingColumns(Protocol):
    """What these checks read of :class:`~.market_view.OfferingColumns` (one entry per row)."""

    @property
    def offerings(self) -> Sequence[Offering]: ...
    @property
    def provider(self) -> np.ndarray: ...
    @property
    def gpu(self) -> np.ndarray: ...
    @property
    def gpu_names(self) -> Sequence[str]: ...
    @property
    def gpu_count(self) -> np.ndarray: ...
    @property
    def on_demand_price_usd_per_hour(self) -> np.ndarray: ...
    @property
    def catalog_spot_price_usd_per_hour(self) -> np.ndarray: ...


def catalog_floor_per_gpu(columns: OfferingColumns) -> np.ndarray:
    """Per row: :data:`IMPLAUSIBLE_PRICE_FRACTION` of the lowest catalog price per GPU of the row's
    GPU model over every row (NaN where the GPU has no catalog price, or the row no GPU)."""
    count = columns.gpu_count.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_gpu = np.fmin(
            columns.on_demand_price_usd_per_hour / count,
            columns.catalog_spot_price_usd_per_hour / count,
        )
    per_gpu[~((count > 0) & (per_gpu > 0) & np.isfinite(per_gpu))] = np.nan
    lowest = np.full(len(columns.gpu_names), np.nan)
    np.fmin.at(lowest, columns.gpu, per_gpu)  # fmin keeps the number over a NaN
    return np.asarray(lowest[columns.gpu] * IMPLAUSIBLE_PRICE_FRACTION, dtype=float)


def drop_implausible(
    columns: OfferingColumns,
    spot: np.ndarray,
    on_note: Callable[[str], object] | None = None,
) -> list[str]:
    """Set every live spot price of ``spot`` (one per row of ``columns``; NaN: not reported) that
    cannot be true to NaN, and return one note per provider that gave any (also handed to
    ``on_note``, else logged)."""
    if not len(spot):
        return []
    count = columns.gpu_count.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_gpu = spot / count
    floor = catalog_floor_per_gpu(columns)
    bad = np.isinf(spot) | (spot <= 0) | (per_gpu < floor)
    notes = [_note(columns, spot, rows) for rows in _by_provider(columns, np.flatnonzero(bad))]
    spot[bad] = np.nan
    for note in notes:
        if on_note is None:
            log.info("%s", note)
        else:
            on_note(note)
    return notes


def _by_provider(columns: OfferingColumns, rows: np.ndarray) -> list[np.ndarray]:
    providers = columns.provider[rows]
    return [rows[providers == code] for code in np.unique(providers)]


def _note(columns: OfferingColumns, spot: np.ndarray, rows: np.ndarray) -> str:
    first = int(rows[0])
    o = columns.offerings[first]
    share = f"{IMPLAUSIBLE_PRICE_FRACTION:.0%}"
    return (
        f"{o.provider}: {len(rows)} spot price(s) cannot be true (below {share} of the GPU's "
        f"lowest catalog price, or not finite), e.g. {o.instance_type} in {o.location} at "
        f"USD {spot[first]:g}/h: taken as missing (the catalog's price stands in)"
    )
