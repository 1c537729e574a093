"""Retry a backend call through lost connections, with capped exponential backoff."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from spothop.queue.errors import QueueUnavailableError

T = TypeVar("T")
log = logging.getLogger(__name__)

# Enough to ride out a PostgreSQL failover or a Redis restart (~10 s in all)
# without hiding a server that is really gone.
RETRY_ATTEMPTS = 8
RETRY_FIRST_DELAY_S = 0.05
RETRY_MAX_DELAY_S = 2.0


def with_retry(
    call: Callable[[], T],
    transient: tuple[type[BaseException], ...],
    what: str,
    attempts: int = RETRY_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``call``; on a ``transient`` error wait and run it again, up to ``attempts`` times.

    ``call`` must be safe to repeat: every queue operation is one transaction
    (or one Lua script) that either happened or did not, and a repeated
    complete is recognised as the same complete.
    """
    delay = RETRY_FIRST_DELAY_S
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except transient as exc:
            if attempt == attempts:
                raise QueueUnavailableError(
                    f"{what}: backend unreachable after {attempts} tries: {exc}"
                ) from exc
            log.warning("%s: %s; retrying in %.2fs", what, exc, delay)
            sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)
    raise AssertionError("unreachable")  # the loop returns or raises
