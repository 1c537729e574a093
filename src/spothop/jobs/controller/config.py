"""The controller's knobs: one frozen dataclass, every default named with why."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from spothop.errors import ConfigError

# Preemptions cluster: a market that just took an instance often takes the next (issue G: 30 min).
COOLDOWN_S = 30 * 60.0
# Instances of one zone lost within this of each other were lost "at once" (an outage).
ZONE_OUTAGE_WINDOW_S = 120.0
# A zone that just took an instance back is likely to take the next: relaunches avoid it this long.
ZONE_SUSPICION_S = 5 * 60.0
# One lost instance is a preemption, not an outage.
ZONE_OUTAGE_MIN_INSTANCES = 2
# After a launch failure, this many candidates are launched at once (issue G: k = 3).
FAILOVER_K = 3
# An attempt still launching with no instance after this was lost mid-launch (a controller crash).
LAUNCH_TIMEOUT_S = 15 * 60.0
# A just-accepted launch may be missing from its provider's listing this long (EC2 lags ~1 min).
LISTING_GRACE_S = 60.0
# A handed-over instance asked to stop is terminated if it is still up after this.
STOP_GRACE_S = 300.0
# A market a launch of this job just failed in is skipped this long (capacity comes back).
FAILED_MARKET_MEMORY_S = 15 * 60.0
# Usable candidates read per kind per job: spread scans the best; the rest cost more than they add.
CANDIDATE_LIMIT = 64
# A deadline policy decides per interval of this (SIMULATION.md's gap: 600 s in the 2022 traces).
DEADLINE_TICK_S = 600.0
# A group stopped for a node's advance notice (no deadline given) saves within this: AWS's
# rebalance recommendation comes at least 2 min before the final notice's 2 min, so a minute
# leaves the save done well before the cloud could act.
GROUP_ADVANCE_STOP_S = 60.0
# A group member still up this long after its stop's deadline is terminated: the agent kills its
# worker at the deadline and exits within seconds; one that does not is stuck (a blocked collective).
GROUP_STOP_GRACE_S = 30.0
# The agent's heartbeat interval (the agent's own default, wall seconds); an agent silent for
# HEARTBEAT_MISSES of them is lost (a dead agent, a VM that hangs): 90 s, generous to a busy host.
HEARTBEAT_INTERVAL_S = 10.0
HEARTBEAT_MISSES = 9
# Installing spothop at boot takes wall time whatever a simulated cloud's speed: a boot deadline
# read on the controller's clock is never shorter than this.
BOOT_DEADLINE_FLOOR_S = 300.0
# The same job's agent lost this many times in a row, none registering: it fails (a boot script
# that fails every time, a network that never reaches the control plane) instead of paying on.
AGENT_LOST_LIMIT = 3
# Attempts in a row that made no progress alike (instances failing before their worker ran, a batch
# worker exiting 0 without claiming a shard) before the job fails (progress.py): a fourth would fail
# the same way, billed.
NO_PROGRESS_LIMIT = 3


@dataclass(frozen=True)
class ControllerConfig:
    """What :func:`~spothop.jobs.controller.decide.decide` is tuned by (seconds; counts)."""

    cooldown_s: float = COOLDOWN_S
    zone_cooldown_s: float = COOLDOWN_S
    zone_outage_window_s: float = ZONE_OUTAGE_WINDOW_S
    zone_suspicion_s: float = ZONE_SUSPICION_S
    zone_outage_min_instances: int = ZONE_OUTAGE_MIN_INSTANCES
    failover_k: int = FAILOVER_K
    launch_timeout_s: float = LAUNCH_TIMEOUT_S
    listing_grace_s: float = LISTING_GRACE_S
    stop_grace_s: float = STOP_GRACE_S
    failed_market_memory_s: float = FAILED_MARKET_MEMORY_S
    candidate_limit: int = CANDIDATE_LIMIT
    deadline_tick_s: float = DEADLINE_TICK_S
    group_advance_stop_s: float = GROUP_ADVANCE_STOP_S
    group_stop_grace_s: float = GROUP_STOP_GRACE_S
    # The restart overhead a deadline policy plans with; None: the provider's boot time.
    restart_overhead_s: float | None = None
    # Agent liveness (docs/controller.md): None takes each provider's declared boot deadline.
    boot_deadline_s: float | None = None
    boot_deadline_floor_s: float = BOOT_DEADLINE_FLOOR_S
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S
    heartbeat_misses: int = HEARTBEAT_MISSES
    agent_lost_limit: int = AGENT_LOST_LIMIT
    no_progress_limit: int = NO_PROGRESS_LIMIT

    @property
    def heartbeat_deadline_s(self) -> float:
        """An agent silent this long (controller seconds) is lost."""
        return self.heartbeat_interval_s * self.heartbeat_misses


DEADLINE_TICK_ENV = "SPOTHOP_DEADLINE_TICK_S"  # the deadline policies' interval, seconds
BOOT_DEADLINE_ENV = "SPOTHOP_BOOT_DEADLINE_S"  # every provider's boot deadline, seconds
HEARTBEAT_MISSES_ENV = "SPOTHOP_HEARTBEAT_MISSES"  # heartbeat intervals an agent may miss
_ENV_FIELDS = {
    DEADLINE_TICK_ENV: "deadline_tick_s",
    BOOT_DEADLINE_ENV: "boot_deadline_s",
    HEARTBEAT_MISSES_ENV: "heartbeat_misses",
}


def config_from_env(environ: Mapping[str, str]) -> ControllerConfig | None:
    """The daemon's config: ``$SPOTHOP_DEADLINE_TICK_S`` overrides ``deadline_tick_s`` (a world
    that runs in minutes, as the end-to-end tests' does), ``$SPOTHOP_BOOT_DEADLINE_S`` every
    provider's boot deadline and ``$SPOTHOP_HEARTBEAT_MISSES`` the heartbeat intervals an agent
    may miss; None (the defaults) when none is set. A value that is not a number over 0 (a whole
    one for the misses) is a :class:`ConfigError` naming it."""
    changes: dict[str, float | int] = {}
    for env, name in _ENV_FIELDS.items():
        raw = environ.get(env)
        if raw is None or raw == "":
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        whole = name != "heartbeat_misses" or value.is_integer()
        if not math.isfinite(value) or value <= 0 or not whole:
            what = (
                "a whole number over 0"
                if name == "heartbeat_misses"
                else "a number of seconds over 0"
            )
            raise ConfigError(f"${env} {raw!r}: expected {what}")
        changes[name] = int(value) if name == "heartbeat_misses" else value
    return ControllerConfig(**changes) if changes else None  # type: ignore[arg-type]
