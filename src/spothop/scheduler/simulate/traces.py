"""Trace files → zones, and windows cut from them under a seed.

A trace is any availability trace :func:`spothop.market.traces.read_trace`
reads; spot counts as available in a tick when at least one instance could be
had. A Can't Be Late JSON file outside a folder that tells its polarity is read
the way SIMULATION.md reads the 1-node traces: 1 = unavailable, 0 = available.
A per-tick ``prices`` array, when present, gives that zone's spot price per tick.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spothop.market.availability import TraceKind
from spothop.market.errors import TraceError
from spothop.market.trace_markets import trace_files
from spothop.market.traces import detect_kind, read_trace
from spothop.scheduler.simulate.model import JobSetting, Window, Zone


def load_zone(path: str | Path) -> Zone:
    """One trace file as a zone (module docstring); :class:`TraceError` naming the file if it is not one."""
    path = Path(path)
    kind = None
    if path.suffix.lower() == ".json" and detect_kind(path) is None:
        kind = TraceKind.UNAVAILABLE_FLAG
    trace = read_trace(path, kind=kind)
    return Zone(
        name=path.stem,
        tick_s=float(trace.tick_s),
        available=np.asarray(trace.counts >= 1, dtype=bool),
        prices_usd_per_hour=trace.prices_usd_per_hour,
        source=str(path),
    )


def load_runs_dir(folder: str | Path) -> list[Zone]:
    """Every ``*.json`` trace under ``folder``, sorted, each its own zone."""
    folder = Path(folder)
    files = trace_files(folder)
    if not files:
        raise TraceError(str(folder), "holds no *.json trace", "pass a folder of trace files")
    return [load_zone(f) for f in files]


def _span_ticks(zone: Zone, setting: JobSetting) -> int:
    return math.ceil(setting.deadline_s / zone.tick_s - 1e-9)


def check_zones(zones: Sequence[Zone], setting: JobSetting) -> None:
    """Zones run together share a tick length, and each spans the deadline; else name the file."""
    first = zones[0]
    for zone in zones:
        if zone.tick_s != first.tick_s:
            raise TraceError(
                zone.source or zone.name,
                f"ticks of {zone.tick_s:g} s, but {first.source or first.name} has {first.tick_s:g} s",
                "zones of one job need traces with the same gap_seconds",
            )
        if len(zone) < _span_ticks(zone, setting):
            raise TraceError(
                zone.source or zone.name,
                f"spans {len(zone) * zone.tick_s / 3600:g} h, shorter than the "
                f"{setting.deadline_s / 3600:g} h deadline",
                "use a longer trace or a shorter --deadline-hours",
            )


def windows(
    zones: Sequence[Zone], setting: JobSetting, count: int | None = None, seed: int = 0
) -> list[Window]:
    """``count`` windows over ``zones`` run together, starting at random ticks under ``seed``
    (each window lies inside every trace); one window from the first tick if ``count`` is None."""
    check_zones(zones, setting)
    if count is None:
        return [Window(tuple(zones), 0)]
    length = min(len(z) for z in zones)
    last_start = length - _span_ticks(zones[0], setting)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, last_start + 1, size=count)
    return [Window(tuple(zones), int(s)) for s in starts]
