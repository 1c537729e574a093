"""The controller's knobs: one frozen dataclass, every default named with why."""

from __future__ import annotations

from dataclasses import dataclass

COOLDOWN_S = (
    30 * 60.0
)  # preemptions cluster: a market that just took an instance often takes the next
ZONE_OUTAGE_WINDOW_S = (
    120.0  # instances of one zone lost within this of each other are lost "at once"
)
ZONE_OUTAGE_MIN_INSTANCES = 2  # one lost instance is a preemption, not an outage
FAILOVER_K = 3  # after a launch failure, this many candidates are tried at once (issue G)
LAUNCH_TIMEOUT_S = (
    15 * 60.0
)  # an attempt still launching with no instance after this was lost mid-launch
DEFAULT_BOOT_S = 90.0  # a replacement's boot time when the market view has none for its provider


@dataclass(frozen=True)
class ControllerConfig:
    """What :func:`~spothop.jobs.controller.decide.decide` is tuned by (seconds; counts)."""

    cooldown_s: float = COOLDOWN_S
    zone_cooldown_s: float = COOLDOWN_S
    zone_outage_window_s: float = ZONE_OUTAGE_WINDOW_S
    zone_outage_min_instances: int = ZONE_OUTAGE_MIN_INSTANCES
    failover_k: int = FAILOVER_K
    launch_timeout_s: float = LAUNCH_TIMEOUT_S
    default_boot_s: float = DEFAULT_BOOT_S
