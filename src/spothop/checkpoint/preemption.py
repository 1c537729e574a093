"""Checkpoints that follow the agent: when to save, and what to do on a stop.

One decision per training step, shared by :meth:`TorchState.checkpoint_step`
and the Hugging Face callback:

* a **final notice** (the agent wrote its stop request): save an emergency
  delta, wait for it within the agent's deadline less :data:`SAFETY_MARGIN_S`,
  tell the agent it is saved (``sdk.saved``), and leave with exit code
  :data:`EXIT_PREEMPTED` (75: preempted, resumable) by raising
  :class:`Preempted`;
* an **advance notice** (the agent asked for a checkpoint): a durable save now;
* otherwise a durable save when the checkpointer's interval has passed.

:func:`listen` registers a stop callback with the agent, so that a final
notice arrives as a request the loop sees at its next step instead of a
SIGTERM that would kill it mid-step. Outside an agent every request is absent
and only the interval applies.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable

from spothop.checkpoint.checkpointer import Checkpointer
from spothop.checkpoint.saving import SaveHandle
from spothop.worker import sdk

EXIT_PREEMPTED = 75  # spothop.agent.model.EXIT_PREEMPTED (a test checks they agree)
SAFETY_MARGIN_S = 2.0  # left of the agent's deadline for the process to exit after the save
MIN_WAIT_S = 0.5  # waited for the emergency save even when the deadline has (nearly) passed

log = logging.getLogger("spothop.checkpoint")
_listening = False


class Preempted(SystemExit):
    """Raised after the emergency checkpoint is saved: uncaught, the process exits with 75."""

    def __init__(self, step: int, checkpoint_id: str | None) -> None:
        super().__init__(EXIT_PREEMPTED)
        self.step, self.checkpoint_id = step, checkpoint_id


class Reason(enum.Enum):
    """Why a step saves."""

    STOP = "stop"  # final notice: emergency delta, then exit
    ADVANCE_NOTICE = "advance-notice"  # durable, now
    INTERVAL = "interval"  # durable, the interval has passed


def listen() -> None:
    """Ask the agent for stop requests instead of SIGTERM (once per process; a no-op without an agent)."""
    global _listening
    if not _listening:
        _listening = True
        sdk.on_stop(lambda: None)  # the loop polls sdk.stop_requested() at each step


def due(
    checkpointer: Checkpointer,
    *,
    stop_requested: Callable[[], bool] = sdk.stop_requested,
    periodic: Callable[[], bool] | None = None,
) -> Reason | None:
    """Whether this step saves, and why; ``periodic`` defaults to the checkpointer's interval."""
    if stop_requested():
        return Reason.STOP
    if sdk.checkpoint_requested():
        return Reason.ADVANCE_NOTICE
    if (periodic or checkpointer.should_save)():
        return Reason.INTERVAL
    return None


def emergency_save(
    checkpointer: Checkpointer, step: int, start: Callable[[], SaveHandle]
) -> Preempted:
    """Start the emergency save (``start``), wait for it within the agent's deadline, tell the agent,
    close the checkpointer; returns the :class:`Preempted` to raise. A save that cannot start, fails
    or runs out of time is logged; the agent is told nothing, and the previous checkpoint stands."""
    left = sdk.seconds_left()
    timeout = None if math.isinf(left) else max(MIN_WAIT_S, left - SAFETY_MARGIN_S)
    try:
        manifest = start().wait(timeout)
    except Exception as exc:  # TimeoutError, or a save that failed: nothing to report as saved
        log.error("emergency checkpoint at step %d not saved: %s", step, exc)
        return Preempted(step, None)
    sdk.saved(step=step, checkpoint_id=manifest.checkpoint_id, tier=manifest.tier.value)
    checkpointer.close()
    return Preempted(step, manifest.checkpoint_id)
