"""Live spot prices that cannot be true are taken as missing, with a note, and never ranked.

A market's spot price (the live one, else the offering's own) is judged against the catalog:
per GPU, it may not fall below :data:`IMPLAUSIBLE_PRICE_FRACTION` of the same GPU model's lowest
catalog on-demand price per GPU (any offering with that GPU, any provider). A price that is not
finite, or not above zero, cannot be true either. Such a market's spot price is recorded as
missing (``LiveColumns.spot_missing``), so it is no spot candidate and never ranked; each
provider that gave such prices gets one note (``plan`` prints it).

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

# The deepest spot discounts the large clouds publish are about 90 % off on-demand (EC2: "up to
# 90 %"): a spot price per GPU under 5 % of the cheapest on-demand price per GPU of that GPU in
# the catalog is more than half as deep again as the deepest, which no market shows.
IMPLAUSIBLE_PRICE_FRACTION = 0.05


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
    """Per row: :data:`IMPLAUSIBLE_PRICE_FRACTION` of the lowest catalog on-demand price per GPU
    of the row's GPU model over every row (NaN where the GPU has none, or the row no GPU).

    On-demand only: an offering's spot price may be the provider's own live figure (EC2's
    adapter writes it into its offerings), the very thing judged here.
    """
    count = columns.gpu_count.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_gpu = columns.on_demand_price_usd_per_hour / count
    per_gpu[~((count > 0) & (per_gpu > 0) & np.isfinite(per_gpu))] = np.nan
    lowest = np.full(len(columns.gpu_names), np.nan)
    np.fmin.at(lowest, columns.gpu, per_gpu)  # fmin keeps the number over a NaN
    return np.asarray(lowest[columns.gpu] * IMPLAUSIBLE_PRICE_FRACTION, dtype=float)


def implausible_spot(
    columns: OfferingColumns,
    live_spot: np.ndarray,
    on_note: Callable[[str], object] | None = None,
) -> np.ndarray:
    """The rows whose spot price cannot be true (a bool mask): the live one of ``live_spot``
    (NaN: not reported), else the offering's own. Their live prices are set to NaN in
    ``live_spot`` (not taken). One note per provider that gave any, handed to ``on_note`` (else
    logged)."""
    spot = np.where(np.isnan(live_spot), columns.catalog_spot_price_usd_per_hour, live_spot)
    count = columns.gpu_count.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_gpu = spot / count
        bad = np.isinf(spot) | (spot <= 0) | (per_gpu < catalog_floor_per_gpu(columns))
    live_spot[bad] = np.nan
    for rows in _by_provider(columns, np.flatnonzero(bad)):
        note = _note(columns, spot, rows)
        if on_note is None:
            log.info("%s", note)
        else:
            on_note(note)
    return np.asarray(bad, dtype=bool)


def _by_provider(columns: OfferingColumns, rows: np.ndarray) -> list[np.ndarray]:
    providers = columns.provider[rows]
    # sorted(set(...)), not np.unique: that imports numpy.ma on its first call, on a request
    # path after the server has settled its heap (tests/server/test_heap.py).
    return [rows[providers == code] for code in sorted(set(providers.tolist()))]


def _note(columns: OfferingColumns, spot: np.ndarray, rows: np.ndarray) -> str:
    first = int(rows[0])
    o = columns.offerings[first]
    share = f"{IMPLAUSIBLE_PRICE_FRACTION:.0%}"
    return (
        f"{o.provider}: {len(rows)} spot price(s) cannot be true (below {share} of the GPU's "
        f"lowest catalog on-demand price, or not finite), e.g. {o.instance_type} in "
        f"{o.location} at USD {spot[first]:g}/h: taken as missing"
    )
