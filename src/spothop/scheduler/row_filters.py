"""The requirements as row masks over an offering table: which rows each filter lets through.

The vectorised half of :class:`~spothop.scheduler.requirements.Requirements`
(``Requirements.failed`` says the same of one offering, filter by filter; a
property test holds the two together). Pure numpy over the columns of
:class:`~spothop.scheduler.market_view.OfferingTable`; no I/O.

- :func:`filter_masks`: name → bool mask of the rows *passing* that filter,
  for the filters a job sets (names from
  :data:`~spothop.scheduler.requirements.FILTERS`, plus ``any_of`` for
  alternatives: a row passes when it meets any one of them).
- :func:`gpus_refused`: the compatibility matrix's reason for each GPU it
  refused among the rows that met every other filter.
- :func:`qualifying`: the rows that pass every filter.
- :func:`excluded_rows`: the rows of markets a caller excludes, per kind.
- :func:`alternative_ranks`: each candidate's rank under ordered alternatives, its market
  included (an alternative may name one), and whether it meets any.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind, OfferingTable
from spothop.scheduler.requirements import INTERCONNECT_RANK, Requirements


def _codes_of(names: Sequence[str], wanted: Iterable[str]) -> np.ndarray:
    index = {name: i for i, name in enumerate(names)}
    return np.array([index[w] for w in wanted if w in index], dtype=np.int32)


def filter_masks(t: OfferingTable, req: Requirements) -> dict[str, np.ndarray]:
    """name → bool mask of the rows *passing* that filter (only filters that are set)."""
    masks: dict[str, np.ndarray] = {}
    if req.providers_allow or req.providers_deny:
        allowed = [p for p in t.provider_names if req.allows_provider(p)]
        masks["providers"] = np.isin(t.provider, _codes_of(t.provider_names, allowed))
    for name, column, names, wanted in (
        ("regions", t.region, t.region_names, req.regions),
        ("zones", t.zone, t.zone_names, tuple(z for z in req.zones if z)),
        ("gpu", t.gpu, t.gpu_names, tuple(sorted(req.gpu_names))),
    ):
        if wanted or (name == "zones" and req.zones):
            masks[name] = np.isin(column, _codes_of(names, wanted))
    if req.instance_type is not None:
        masks["instance_type"] = np.isin(
            t.instance_type, _codes_of(t.instance_type_names, (req.instance_type,))
        )
    if req.node_gpus is not None:
        masks["gpus_per_node"] = t.gpu_count == req.node_gpus
    for name, values, bound in (
        ("min_gpu_memory_gib", t.gpu_memory_gib, req.min_gpu_memory_gib),
        ("min_tflops_per_gpu", t.nominal_tflops_per_gpu, req.min_tflops_per_gpu),
        ("min_cpus", t.vcpus, req.min_cpus),
        ("min_memory_gib", t.memory_gib, req.min_memory_gib),
    ):
        if bound is not None:
            masks[name] = values >= bound
    if req.interconnect is not None:
        masks["interconnect"] = t.interconnect_rank >= INTERCONNECT_RANK[req.interconnect]
    if req.checkpoint_gpu is not None:
        refused = req.refusals(t.gpu_names)
        masks["compatible"] = ~np.isin(t.gpu, _codes_of(t.gpu_names, sorted(refused)))
    if req.alternatives:
        any_alt = np.zeros(len(t), dtype=bool)
        for alt in req.alternatives:
            any_alt |= qualifying(t, alt)
        masks["any_of"] = any_alt
    return masks


def alternative_ranks(
    t: OfferingTable, req: Requirements, rows: np.ndarray, is_spot: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate (``rows[j]`` in the market ``is_spot[j]`` says): the rank of the first
    alternative it meets, its market included (an alternative with ``market`` ``spot`` takes only
    spot candidates, ``on-demand`` only the others), 0 for every candidate when the alternatives
    are not ordered; and whether it meets any. Without alternatives, or when none names a market
    and they are not ordered, every candidate meets one at rank 0 (the filters already chose)."""
    count = len(req.alternatives)
    markets = any(alt.market is not None for alt in req.alternatives)
    if not count or (not markets and not req.ordered):
        return np.zeros(len(rows), dtype=np.int32), np.ones(len(rows), dtype=bool)
    rank = np.full(len(rows), count, dtype=np.int32)
    for i in reversed(range(count)):
        alt = req.alternatives[i]
        meets = qualifying(t, alt)[rows]
        if alt.market == "spot":
            meets &= is_spot
        elif alt.market == "on-demand":
            meets &= ~is_spot
        rank[meets] = i
    allowed = rank < count
    if not req.ordered:
        rank[:] = 0
    return rank, allowed


def gpus_refused(
    t: OfferingTable, req: Requirements, masks: dict[str, np.ndarray]
) -> dict[str, str]:
    """gpu → the matrix's reason, for the GPUs refused among rows meeting every other filter."""
    compat = masks.get("compatible")
    if compat is None:
        return {}
    others = np.ones(len(t), dtype=bool)
    for name, mask in masks.items():
        if name != "compatible":
            others &= mask
    codes = np.unique(t.gpu[others & ~compat])
    reasons = req.refusals(t.gpu_names[int(c)] for c in codes)
    return dict(sorted(reasons.items()))


def qualifying(t: OfferingTable, req: Requirements) -> np.ndarray:
    """The rows that pass every filter ``req`` sets."""
    ok = np.ones(len(t), dtype=bool)
    for mask in filter_masks(t, req).values():
        ok &= mask
    return ok


def _market_codes(t: OfferingTable, market: MarketId) -> tuple[int, int, int, int] | None:
    try:
        return (
            t.provider_names.index(market.provider),
            t.region_names.index(market.region),
            t.zone_names.index(market.zone),
            t.instance_type_names.index(market.instance_type),
        )
    except ValueError:
        return None


def excluded_rows(
    t: OfferingTable,
    exclude: Iterable[MarketId | tuple[MarketId, MarketKind]],
    kinds: tuple[MarketKind, ...],
) -> dict[MarketKind, np.ndarray]:
    """kind (of ``kinds``) → bool mask of the rows excluded in that kind: a market alone is
    excluded in every kind, a (market, kind) in that one."""
    out = {kind: np.zeros(len(t), dtype=bool) for kind in kinds}
    for item in exclude:
        market, kinds = (
            (item, kinds) if isinstance(item, MarketId) else (item[0], (MarketKind(item[1]),))
        )
        codes = _market_codes(t, market)
        if codes is None:
            continue
        rows = (
            (t.provider == codes[0])
            & (t.region == codes[1])
            & (t.zone == codes[2])
            & (t.instance_type == codes[3])
        )
        for kind in kinds:
            out[kind] |= rows
    return out
