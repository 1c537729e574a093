"""Retry a backend call through lost connections, with capped exponential backoff."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from spothop.bounds import Bound
from spothop.queue.errors import QueueUnavailableError

T = TypeVar("T")
log = logging.getLogger(__name__)

# Enough to ride out a PostgreSQL failover or a Redis restart (~10 s in all)
# without hiding a server that is really gone.
RETRY_ATTEMPTS = 8
RETRY_FIRST_DELAY_S = 0.05
RETRY_MAX_DELAY_S = 2.0
# Seconds of backoff one call rides out instead: longer for a slower failover, shorter for a
# command that should say at once that the backend is gone (or a test of that message).
RETRY_BUDGET_ENV = "SPOTHOP_QUEUE_RETRY_S"
RETRY_BUDGET_S = Bound(0, 3_600, "s")


def retry_budget_s(environ: Mapping[str, str] = os.environ) -> float | None:
    """``$SPOTHOP_QUEUE_RETRY_S`` in seconds, or None when unset (then :data:`RETRY_ATTEMPTS`
    tries, ~5 s); a value that is not a number of seconds from 0 to an hour is a ConfigError."""
    raw = environ.get(RETRY_BUDGET_ENV, "").strip()
    if not raw:
        return None
    try:
        value: object = float(raw)
    except ValueError:
        value = raw
    return float(RETRY_BUDGET_S.check(value, f"${RETRY_BUDGET_ENV}"))


def with_retry(
    call: Callable[[], T],
    transient: tuple[type[BaseException], ...],
    what: str,
    attempts: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``; on a ``transient`` error wait and run it again, with capped exponential backoff.

    It gives up after ``attempts`` tries (default :data:`RETRY_ATTEMPTS`), or, with
    ``$SPOTHOP_QUEUE_RETRY_S`` set, once the next wait would take the waits past that many
    seconds (and after ``attempts`` tries, where given).

    ``call`` must be safe to repeat: every queue operation is one transaction
    (or one Lua script) that either happened or did not, and a repeated
    complete is recognised as the same complete.
    """
    budget_s = retry_budget_s()
    if attempts is None and budget_s is None:
        attempts = RETRY_ATTEMPTS
    delay, waited_s, attempt = RETRY_FIRST_DELAY_S, 0.0, 0
    while True:
        attempt += 1
        try:
            return call()
        except transient as exc:
            out_of_budget = budget_s is not None and waited_s + delay > budget_s
            if attempt == attempts or out_of_budget:
                raise QueueUnavailableError(
                    f"{what}: backend unreachable after {attempt} tries: {exc}"
                ) from exc
            log.warning("%s: %s; retrying in %.2fs", what, exc, delay)
            sleep(delay)
            waited_s += delay
            delay = min(delay * 2, RETRY_MAX_DELAY_S)
