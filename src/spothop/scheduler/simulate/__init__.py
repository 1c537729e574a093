"""``spothop simulate``: deadline policies run tick by tick against spot traces, no processes.

:mod:`.model` is the tick model (SIMULATION.md, extended to zones and
per-tick prices), :mod:`.traces` turns trace files into zones and cuts windows
under a seed, :mod:`.estimates` is what an online controller knows of a zone at
a tick, :mod:`.results` sums runs up.
"""

from __future__ import annotations

from spothop.scheduler.simulate.model import (
    JobSetting,
    RunResult,
    SimulationError,
    TickRecord,
    Window,
    Zone,
    run,
    zone_from_flags,
)

__all__ = [
    "JobSetting",
    "RunResult",
    "SimulationError",
    "TickRecord",
    "Window",
    "Zone",
    "run",
    "zone_from_flags",
]
