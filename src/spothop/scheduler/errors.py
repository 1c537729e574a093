"""The scheduler's errors: a job no offering can carry, now or ever.

::

    ConfigError
    └── NoCandidates      no offering meets the job's requirements; names the one that
                          excluded the most (exit 2: the spec must change)
    SpothopError
    └── NoCapacityNow     offerings meet them, but none has a price or capacity in the
                          markets asked for now (exit 4: the same call may succeed later)
"""

from __future__ import annotations

from spothop.errors import EXIT_UNAVAILABLE, ConfigError, SpothopError


class NoCandidates(ConfigError):
    """No offering meets the job's requirements; the message names the one that excluded the most."""


class NoCapacityNow(SpothopError):
    """Offerings meet the requirements, but none has a price or capacity in the markets asked for now."""

    exit_code = EXIT_UNAVAILABLE
