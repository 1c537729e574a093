"""Spreading workers so one zone's or one type's preemption storm does not take them all.

``spread(ranked, count, min_zones, min_instance_types, alive=())`` picks
``count`` placements from candidates ranked best first. Rules:

1. Zones and instance types of ``alive`` (the job's instances still running,
   as candidates or market ids) count as already used.
2. Each pick, in turn, is the best-ranked candidate that adds what is still
   missing: a new zone while fewer than ``min_zones`` are used *and* a new
   type while fewer than ``min_instance_types`` are, else the one adding the
   more needed of the two (zones first), else simply the best. A regional
   market's zone is its region.
3. Once both minimums are met (or nothing left can add to them: the market
   does not allow more), the remaining picks go round-robin over the
   placements chosen so far in the order chosen, so ``count`` workers over two
   zones are split evenly rather than piled on the cheapest.
4. Only the best :data:`SCAN_LIMIT` candidates are looked through for a new
   zone or type: a placement ranked further down costs more than the
   diversity is worth, and the scan stays fast on a 100,000-row ranking.
5. Deterministic: the same ranked list gives the same picks. Fewer than
   ``count`` only when ``ranked`` is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from spothop.resources.market_id import MarketId
from spothop.scheduler.placement import Candidate

SCAN_LIMIT = 2000


def _place(market: MarketId) -> tuple[str, str]:
    return (market.provider, market.location)


def spread(
    ranked: Sequence[Candidate],
    count: int,
    min_zones: int = 1,
    min_instance_types: int = 1,
    alive: Iterable[Candidate | MarketId] = (),
) -> list[Candidate]:
    """``count`` placements from ``ranked`` (best first) per the module rules."""
    if count <= 0 or not ranked:
        return []
    zones: set[tuple[str, str]] = set()
    types: set[tuple[str, str]] = set()
    for item in alive:
        market = item.market_id if isinstance(item, Candidate) else item
        zones.add(_place(market))
        types.add((market.provider, market.instance_type))

    chosen: list[Candidate] = []
    while len(chosen) < count:
        need_zone = len(zones) < min_zones
        need_type = len(types) < min_instance_types
        if not (need_zone or need_type):
            break
        best: tuple[int, int] | None = None  # (how much it adds, negated; index)
        for index in range(min(len(ranked), SCAN_LIMIT)):
            candidate = ranked[index]
            market = candidate.market_id
            new_zone = need_zone and _place(market) not in zones
            new_type = need_type and (market.provider, market.instance_type) not in types
            gain = 2 * new_zone + new_type if need_zone else new_type
            if gain and (best is None or -gain < best[0]):
                best = (-gain, index)
                if gain == (2 + need_type if need_zone else 1):
                    break  # nothing later can add more, and this ranks best
        if best is None:
            break  # the market allows no more zones or types
        pick = ranked[best[1]]
        chosen.append(pick)
        zones.add(_place(pick.market_id))
        types.add((pick.market_id.provider, pick.market_id.instance_type))

    if not chosen:
        chosen.append(ranked[0])
    base = list(chosen)
    while len(chosen) < count:
        chosen.append(base[(len(chosen) - len(base)) % len(base)])
    return chosen
