"""What the controller daemon reads from its environment, checked before it takes its lock.

A bad value (``SPOTHOP_DEADLINE_TICK_S=nan``, ``SPOTHOP_METRICS_PORT=abc``) is a
:class:`~spothop.errors.ConfigError` naming the variable, raised before the daemon counts as
started: ``spothop launch``, which waits for it, says why at once
(:class:`~.daemon.ControllerStartFailed`) instead of following a job no controller runs.
"""

from __future__ import annotations

import os

from spothop.jobs.controller.config import ControllerConfig, config_from_env

METRICS_PORT_ENV = "SPOTHOP_METRICS_PORT"  # the controller's /metrics port when no option gives one
CATALOG_REFRESH_ENV = "SPOTHOP_CATALOG_REFRESH_S"  # seconds between live catalog refreshes; 0: off


def daemon_settings(metrics_port: int | None) -> tuple[ControllerConfig | None, int | None]:
    """The controller's config (:func:`~.config.config_from_env`) and its metrics port
    (``metrics_port``, else ``$SPOTHOP_METRICS_PORT``), the catalog refresh interval checked too."""
    config = config_from_env(os.environ)
    port = metrics_port_from_env(metrics_port)
    catalog_refresh_interval_s()
    return config, port


def catalog_refresh_interval_s() -> float:
    """``$SPOTHOP_CATALOG_REFRESH_S`` (default a day; 0: off); ConfigError naming it otherwise."""
    from spothop.errors import ConfigError
    from spothop.providers.catalog_schedule import REFRESH_INTERVAL_S

    text = os.environ.get(CATALOG_REFRESH_ENV, "").strip()
    try:
        interval_s = float(text) if text else REFRESH_INTERVAL_S
    except ValueError:
        interval_s = -1.0
    if not 0 <= interval_s < float("inf"):
        raise ConfigError(
            f"{CATALOG_REFRESH_ENV}={text!r} is not a number of seconds: set it to the seconds "
            f"between live catalog refreshes (default {REFRESH_INTERVAL_S:.0f}), or 0 for none"
        )
    return interval_s


def metrics_port_from_env(port: int | None) -> int | None:
    """``port``, else ``$SPOTHOP_METRICS_PORT`` (None when neither is set); ConfigError naming it."""
    from spothop.errors import ConfigError

    if port is not None:
        return port
    raw = os.environ.get(METRICS_PORT_ENV, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"${METRICS_PORT_ENV} must be a port number, got {raw!r}") from None
