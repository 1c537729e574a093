"""What every process of the local cloud must agree on: the clock and the markets.

The provider (in the user's shell) and each instance's host process (one per
instance) are separate processes. They agree on simulated time because the
clock's anchor — wall time, simulated time and speed — is stored once in the
cloud's records, and on the market because it is a deterministic function of
the world (seed, traces) and the market's start time, also stored once.
"""

from __future__ import annotations

import time

from spothop.market import SimClock, SpotMarket
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import World
from spothop.resources.market_id import MarketId

_SIM_START = "sim_start"
_WALL_START = "wall_start"
_SPEED = "speed"
_MARKET_START = "market_start"


def cloud_clock(store: CloudStore, world: World) -> SimClock:
    """The local cloud's clock, anchored at its first use, re-anchored if the speed changes.

    Re-anchoring keeps simulated time continuous: the new anchor is "now" on
    the old clock, so no instance sees time jump backwards.
    """
    now = time.time()
    stored = store.set_state_default(
        {_SIM_START: repr(now), _WALL_START: repr(now), _SPEED: repr(world.speed), _MARKET_START: repr(now)}
    )
    clock = SimClock(float(stored[_SPEED]), float(stored[_SIM_START]), float(stored[_WALL_START]))
    if float(stored[_SPEED]) != world.speed:
        sim_now = clock.now()
        store.set_state({_SIM_START: repr(sim_now), _WALL_START: repr(now), _SPEED: repr(world.speed)})
        clock = SimClock(world.speed, sim_now, now)
    return clock


def market_start(store: CloudStore) -> float:
    """When the markets' time axis starts: stored at first use, the same for every process after."""
    return float(store.set_state_default({_MARKET_START: repr(time.time())})[_MARKET_START])


def spot_market(store: CloudStore, world: World, keys: list[MarketId] | None = None) -> SpotMarket:
    """The world's spot market (or just ``keys`` of it: a host needs only its own)."""
    sources = world.market_sources
    if keys is not None:
        sources = {k: sources[k] for k in keys}
    return SpotMarket(sources, sim_start=market_start(store), seed=world.seed)
