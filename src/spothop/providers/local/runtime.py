"""What every process of the local cloud must agree on: the clock and the markets.

The provider (in the user's shell) and each instance's host process (one per
instance) are separate processes. They agree on simulated time because the
clock's anchor — wall time, simulated time and speed — is stored once in the
cloud's records, and on the market because it is a deterministic function of
the world (seed, traces) and the market's start time, also stored once.

Only what runs the cloud writes the anchor: a launch (:meth:`LocalProvider.launch`)
and an instance's host, through :func:`cloud_clock` and ``market_start(anchor=True)``.
Everything that only looks (``spothop cloud world``, ``ls``, spot prices) reads it
through :func:`read_clock`, which never writes: a display command given a world
file with another ``speed`` shows that world from the same instant, and leaves
the shared clock as it was.

An anchor made at another speed is re-anchored by the next launch, continuously
(the new anchor is "now" on the old clock, so no instance sees time jump back),
unless instances are still running on it: they would be on another clock than
the new one, so that launch is refused, naming them and the two speeds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from spothop.errors import ConfigError
from spothop.market import SimClock, SpotMarket
from spothop.providers.base import InstanceState
from spothop.providers.local.store import CloudStore
from spothop.providers.local.storms import StormyMarket
from spothop.providers.local.world import World
from spothop.resources.market_id import MarketId

_SIM_START = "sim_start"
_WALL_START = "wall_start"
_SPEED = "speed"
_WORLD = "world"  # the origin of the world that anchored the clock, for messages
_MARKET_START = "market_start"
_SHOWN = 3  # instance ids named in a refusal


@dataclass(frozen=True)
class ClockAnchor:
    """The stored anchor: ``SimClock(speed, sim_start, wall_start)``, made by ``world``."""

    speed: float
    sim_start: float
    wall_start: float
    world: str | None

    def clock(self) -> SimClock:
        return SimClock(self.speed, self.sim_start, self.wall_start)


def stored_anchor(store: CloudStore) -> ClockAnchor | None:
    """The anchor in the cloud's records, or ``None`` before the first launch."""
    # One read, not one a key: every status and price of a running job reads the clock.
    values = store.get_states((_SPEED, _SIM_START, _WALL_START, _WORLD))
    if values[_SPEED] is None or values[_SIM_START] is None or values[_WALL_START] is None:
        return None
    try:
        speed, sim_start, wall_start = (
            float(values[k] or "") for k in (_SPEED, _SIM_START, _WALL_START)
        )
    except ValueError:
        speed = math.nan
    if not (
        math.isfinite(speed)
        and speed > 0
        and math.isfinite(sim_start)
        and math.isfinite(wall_start)
    ):
        raise ConfigError(
            f"the local cloud's clock anchor in {store.root / 'cloud.db'} is damaged "
            f"(speed {values[_SPEED]!r}); remove that file to start the local cloud afresh"
        )
    return ClockAnchor(speed, sim_start, wall_start, values[_WORLD])


def read_clock(store: CloudStore, world: World) -> SimClock:
    """The clock as ``world`` sees it now, without writing anything.

    The stored clock when its speed is the world's; else the world's speed from
    the stored clock's "now" (from the wall's now before any anchor).
    """
    anchor = stored_anchor(store)
    now = time.time()
    if anchor is None:
        return SimClock(world.speed, now, now)
    if anchor.speed == world.speed:
        return anchor.clock()
    return SimClock(world.speed, anchor.clock().now(), now)


def cloud_clock(store: CloudStore, world: World, market_start_s: float | None = None) -> SimClock:
    """The local cloud's clock, anchored at its first use, re-anchored if the speed changes.

    For what runs the cloud (a launch, an instance host). A speed change while
    instances run is refused (:class:`ConfigError`); see the module docstring.
    ``market_start_s`` (at most now) is the market start to store with a first
    anchor: a provider passes the one it showed prices with, so that the market
    it previewed is the market its launch gets.
    """
    now = time.time()
    # The market's axis starts with the clock, in one write, so no process sees a time before it.
    stored = store.set_state_default(
        {
            _SIM_START: repr(now),
            _WALL_START: repr(now),
            _SPEED: repr(world.speed),
            _WORLD: world.origin,
            _MARKET_START: repr(now if market_start_s is None else min(market_start_s, now)),
        }
    )
    anchor = stored_anchor(store)
    assert anchor is not None  # set just above
    if anchor.speed == world.speed:
        return anchor.clock()
    live = [r["instance_id"] for r in store.all_instances() if InstanceState(r["state"]).is_alive]
    if live:
        more = f" and {len(live) - _SHOWN} more" if len(live) > _SHOWN else ""
        raise ConfigError(
            f"the local cloud's clock runs at speed {anchor.speed:g} (anchored by {stored.get(_WORLD) or 'a world'}), "
            f"and {len(live)} instance(s) run on it ({', '.join(live[:_SHOWN])}{more}); {world.origin} has speed "
            f"{world.speed:g}. Terminate them (`spothop cloud terminate ID…`) or use a world with speed {anchor.speed:g}"
        )
    sim_now = anchor.clock().now()
    store.set_state(
        {
            _SIM_START: repr(sim_now),
            _WALL_START: repr(now),
            _SPEED: repr(world.speed),
            _WORLD: world.origin,
        }
    )
    return SimClock(world.speed, sim_now, now)


def market_start(store: CloudStore, *, anchor: bool = True) -> float:
    """When the markets' time axis starts: stored at first use (``anchor``), the same for every
    process after. Without ``anchor`` nothing is written: before the first launch, it is now
    (and a launch stores that, see :func:`cloud_clock`)."""
    if not anchor:
        stored = store.get_state(_MARKET_START)
        return float(stored) if stored is not None else time.time()
    return float(store.set_state_default({_MARKET_START: repr(time.time())})[_MARKET_START])


def stored_market_start(store: CloudStore) -> float | None:
    """The markets' start as the cloud stored it at its first launch; None before one."""
    stored = store.get_state(_MARKET_START)
    return float(stored) if stored is not None else None


def spot_market(
    store: CloudStore,
    world: World,
    keys: list[MarketId] | None = None,
    *,
    anchor: bool = True,
    start_s: float | None = None,
) -> SpotMarket:
    """The world's spot market (or just ``keys`` of it: a host needs only its own), starting at
    ``start_s`` if given, else at :func:`market_start`; the world's storms played on it."""
    sources = world.market_sources
    if keys is not None:
        sources = {k: sources[k] for k in keys}
    start = market_start(store, anchor=anchor) if start_s is None else start_s
    return StormyMarket(sources, sim_start=start, seed=world.seed, storms=world.storm_windows)


def market_drop(market: SpotMarket, key: MarketId, now: float) -> float | None:
    """When ``key`` next loses its spot capacity, from ``now`` on: ``now`` if it has none now,
    None if it never drops again. What an instance host reclaims at, and what the provider
    forecasts from."""
    return market.next_preemption_after(key, now) if market.is_available(key, now) else now
