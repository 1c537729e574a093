"""The job's secrets into the worker's environment, fetched from the control plane.

The launch tells the agent only their names (``SPOTHOP_SECRET_NAMES``); before the worker
starts the agent asks the control plane for the values with its own token
(:meth:`~spothop.wire.contract.ControlPlane.secrets`) and puts them in the worker's
environment only: never in its own environment, its events, its log or a file. A secret the
control plane does not give (it is unreachable, or the job has no such secret) fails the
attempt before the worker starts, naming it: a worker run without its token would fail
later, and less clearly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from spothop.wire.contract import SECRET_NAMES_ENV, ControlPlane
from spothop.wire.errors import ControlPlaneError

log = logging.getLogger("spothop.agent")

SECRETS_TRIES = 5  # the HTTP plane retries each call too; this outlasts a controller's restart
SECRETS_RETRY_S = 2.0


def secret_names(env: Mapping[str, str]) -> tuple[str, ...]:
    """The names the launch listed (``SPOTHOP_SECRET_NAMES``), in order; empty for none."""
    return tuple(n for n in env.get(SECRET_NAMES_ENV, "").split(",") if n)


def add_secrets(plane: ControlPlane, env: dict[str, str]) -> bool:
    """The secrets ``env`` (the worker's) names, fetched from ``plane`` into it; False (logged)
    when they cannot all be had. True at once for a job with none."""
    names = secret_names(env)
    values = fetch_secrets(plane, names) if names else {}
    if values is None:
        return False
    env.update(values)
    return True


def fetch_secrets(
    plane: ControlPlane,
    names: tuple[str, ...],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str] | None:
    """The values of ``names`` from ``plane``; None (logged, naming what is missing and never a
    value) when they cannot all be had."""
    got: dict[str, str] = {}
    for attempt in range(SECRETS_TRIES):
        try:
            got = plane.secrets()
            break
        except ControlPlaneError as exc:
            if attempt + 1 == SECRETS_TRIES:
                log.error(
                    "the job's secrets could not be fetched (%s); the worker is not started", exc
                )
                return None
            sleep(SECRETS_RETRY_S)
    missing = [n for n in names if n not in got]
    if missing:
        log.error(
            "the control plane gave no value for the secret(s) %s; the worker is not started",
            ", ".join(missing),
        )
        return None
    log.info("the job's secrets %s are in the worker's environment", ", ".join(names))
    return {n: got[n] for n in names}
