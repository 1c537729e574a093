"""Waiting in tests: for an event, with a deadline, scaled for a loaded machine.

Tests that wait on real processes never sleep for a fixed time that assumes an
idle machine; they poll for the event (a file, a state, a message) until a
deadline. Every deadline goes through :func:`scaled`, so one variable,
``SPOTHOP_TEST_TIME_SCALE`` (default 1), stretches them all on a slow machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from spothop.processes import process_running

__all__ = ["poll_until", "process_running", "scaled", "wait_for"]

T = TypeVar("T")

TIME_SCALE = float(os.environ.get("SPOTHOP_TEST_TIME_SCALE", "1") or 1)


def scaled(seconds: float) -> float:
    """``seconds`` stretched by ``SPOTHOP_TEST_TIME_SCALE``: the deadline for an event, never a sleep."""
    return seconds * TIME_SCALE


def wait_for(
    predicate: Callable[[], T],
    timeout_s: float = 10.0,
    *,
    what: str = "condition",
    interval_s: float = 0.02,
) -> T:
    """Poll ``predicate`` until it returns something truthy and return it; fail the test after
    ``scaled(timeout_s)`` seconds, naming ``what`` was awaited."""
    value = poll_until(predicate, timeout_s, interval_s=interval_s)
    if not value:
        pytest.fail(f"{what} not met within {scaled(timeout_s):.1f} s")
    return value


def poll_until(
    predicate: Callable[[], T], timeout_s: float, *, interval_s: float = 0.02
) -> T | None:
    """As :func:`wait_for`, but ``None`` after the deadline: for an event a test can do without."""
    deadline = time.monotonic() + scaled(timeout_s)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval_s)
