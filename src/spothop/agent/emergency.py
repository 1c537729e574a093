"""The emergency protocol: what the agent does between a final notice and the kill.

Steps, each timed (``steps_s`` of the ``interruption`` event):

0. ``prepare`` — the control plane starts importing and connecting what
   steps 4 and 5 need, in the background, so that cost (seconds on a busy
   machine) runs while the worker saves instead of after it. Until step 4
   is done, events go to the local log only (:meth:`Reporter.hold`).
1. ``stop`` — budget = deadline − now − safety margin (never negative). Write
   ``stop.json`` (the SDK's ``stop_requested()`` and ``seconds_left()``), then
   SIGTERM the worker's process group — unless the worker registered an
   ``on_stop`` callback, which the SDK runs on seeing ``stop.json``
   (``save_requested``).
2. ``save`` — wait up to the budget for the worker to call ``saved()`` or to
   exit (``saved``). Then the group is SIGKILLed: after the budget a worker
   that ignores the stop is not allowed to run on while its leases are handed back.
3. ``upload`` — the upload hook, if any (``uploaded``).
4. ``release`` — the worker's leases: the ``--lease-releaser`` hook if one is
   given, else the control plane; if the control plane cannot be reached,
   the job's queue directly where it is known (``leases_released``, with ``via``).
5. ``record`` — the ``interruption`` event: the local log first (fast), then
   the control plane (the store's preemption history, or the HTTP spool);
   an ``interruption_recorded`` event then carries every step's time, the
   record's own included.
6. ``acknowledge`` — tell the cloud the instance may go now (Azure's
   StartRequests): last, because the platform may take the VM at once.

A hook or a call that raises is logged in ``errors`` and the next step runs:
nothing a worker, a hook or the control plane does stops the leases from
being released and the interruption reported. The caller exits with
``EXIT_PREEMPTED``.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from spothop.agent.control import ControlDir
from spothop.agent.hooks import LeaseReleaser, Upload
from spothop.agent.model import Notice
from spothop.agent.reporter import Reporter
from spothop.agent.supervisor import Supervisor
from spothop.controlplane.queue_leases import QueueLeases
from spothop.wire.contract import ControlPlane
from spothop.wire.errors import ControlPlaneError
from spothop.wire.events import (
    Interruption,
    InterruptionRecorded,
    LeasesReleased,
    Saved,
    SaveRequested,
    Uploaded,
)

log = logging.getLogger(__name__)

SAVE_POLL_S = 0.02  # how often the agent looks for saved.json or the worker's exit


@dataclass(frozen=True)
class EmergencyContext:
    """What the protocol works with; hooks that are None are skipped (and reported as such).

    ``queue`` is the job's queue, the fallback for releasing leases when the
    control plane cannot be reached (None: not known on this instance).
    """

    supervisor: Supervisor
    control: ControlDir
    reporter: Reporter
    plane: ControlPlane
    worker_id: str
    safety_margin_s: float
    releaser: LeaseReleaser | None = None
    queue: QueueLeases | None = None
    upload: Upload | None = None
    acknowledge: Callable[[Notice], None] | None = None
    clock: Callable[[], float] = time.time


def run_emergency(notice: Notice, ctx: EmergencyContext) -> Interruption:
    """Run every step for ``notice``; returns the interruption event (already recorded)."""
    steps: dict[str, float] = {}
    errors: dict[str, str] = {}
    ctx.reporter.hold()
    deadline = notice.deadline if notice.deadline is not None else ctx.clock()
    budget = max(0.0, deadline - ctx.clock() - ctx.safety_margin_s)
    start = time.monotonic()
    delivery = _deliver_stop(notice, ctx, deadline)
    steps["stop"] = time.monotonic() - start
    _timed(steps, errors, "prepare", ctx.plane.prepare)
    ctx.reporter.report(
        SaveRequested,
        cause=notice.cause,
        delivery=delivery,
        budget_s=budget,
        deadline_unix_s=deadline,
        lead_time_s=notice.lead_time_s,
    )
    saved, detail = _wait_for_save(ctx, budget)
    ctx.supervisor.kill()
    steps["save"] = time.monotonic() - start - steps["stop"] - steps["prepare"]
    ctx.reporter.report(Saved, outcome=saved, detail=detail, duration_s=steps["save"])
    if ctx.upload is not None:
        _timed(steps, errors, "upload", ctx.upload)
        ctx.reporter.report(
            Uploaded,
            ok="upload" not in errors,
            error=errors.get("upload"),
            duration_s=steps["upload"],
        )
    begun = time.monotonic()
    released, via, error = release_leases(ctx.worker_id, ctx.plane, ctx.releaser, ctx.queue)
    steps["release"] = time.monotonic() - begun
    if error is not None:
        errors["release"] = error
    ctx.reporter.report(
        LeasesReleased, count=released, cause=notice.cause, via=via, error=errors.get("release")
    )
    ctx.reporter.send_held()
    event = _record(
        notice, ctx, steps, errors, budget=budget, saved=saved, detail=detail, released=released
    )
    if ctx.acknowledge is not None:
        acknowledge = ctx.acknowledge
        _timed(steps, errors, "acknowledge", lambda: acknowledge(notice))
    return event


def release_leases(
    worker_id: str, plane: ControlPlane, releaser: LeaseReleaser | None, queue: QueueLeases | None
) -> tuple[int | None, str, str | None]:
    """The worker's leases back: the hook, else the control plane, else (it being unreachable) the queue.

    Returns (how many or None, the path taken, the error or None); never raises.
    """
    if releaser is not None:
        return _attempt(lambda: releaser.release_worker(worker_id), "hook")
    try:
        return plane.release_leases(worker_id), "control-plane", None
    except ControlPlaneError as exc:
        if queue is None:
            log.error(
                "releasing leases through the control plane failed; no queue known to fall back on: %s",
                exc,
            )
            return None, "control-plane", f"{type(exc).__name__}: {exc}"
        log.warning("control plane unreachable (%s); releasing the leases through the queue", exc)
        return _attempt(lambda: queue.release_worker(worker_id), "queue")
    except (
        Exception
    ) as exc:  # the queue behind the control plane refused: reported, the protocol goes on
        log.exception("releasing leases failed")
        return None, "control-plane", f"{type(exc).__name__}: {exc}"


def _attempt(release: Callable[[], int], via: str) -> tuple[int | None, str, str | None]:
    try:
        return release(), via, None
    except Exception as exc:
        log.exception("releasing leases (%s) failed", via)
        return None, via, f"{type(exc).__name__}: {exc}"


def _deliver_stop(notice: Notice, ctx: EmergencyContext, deadline: float) -> str:
    ctx.control.request_stop(deadline, f"{notice.protocol}:{notice.cause}", notice.as_dict())
    if ctx.control.callback_mode():
        log.info("stop delivered to the worker's on_stop callback")
        return "callback"
    if ctx.supervisor.signal_group(signal.SIGTERM):
        log.info("SIGTERM sent to the worker's process group")
        return "sigterm"
    return "none"


def _wait_for_save(ctx: EmergencyContext, budget_s: float) -> tuple[str, dict[str, object] | None]:
    until = time.monotonic() + budget_s
    while True:
        detail = ctx.control.saved()
        if detail is not None:
            return "saved", detail
        if ctx.supervisor.poll() is not None:
            return "exited", {"exit_code": ctx.supervisor.poll()}
        if time.monotonic() >= until:
            log.warning("the worker did not save within the %.1f s budget", budget_s)
            return "nothing", None
        time.sleep(SAVE_POLL_S)


def _timed(
    steps: dict[str, float], errors: dict[str, str], name: str, action: Callable[[], object] | None
) -> object:
    if action is None:
        return None
    start = time.monotonic()
    try:
        return action()
    except Exception as exc:  # a failing hook must not stop the next step
        log.exception("emergency step %s failed", name)
        errors[name] = f"{type(exc).__name__}: {exc}"
        return None
    finally:
        steps[name] = time.monotonic() - start


def _record(
    notice: Notice,
    ctx: EmergencyContext,
    steps: dict[str, float],
    errors: dict[str, str],
    *,
    budget: float,
    saved: str,
    detail: dict[str, object] | None,
    released: int | None,
) -> Interruption:
    start = time.monotonic()
    event = ctx.reporter.report(
        Interruption,
        protocol=notice.protocol,
        notice_kind=notice.kind.value,
        cause=notice.cause,
        notice_id=notice.event_id,
        notice_time_unix_s=notice.notice_time,
        deadline_unix_s=notice.deadline,
        lead_time_s=notice.lead_time_s,
        budget_s=budget,
        saved=saved,
        saved_detail=detail,
        uploaded=None if ctx.upload is None else "upload" not in errors,
        leases_released=released,
        steps_s=dict(steps),
        errors=dict(errors),
    )
    steps["record"] = time.monotonic() - start
    ctx.reporter.report(InterruptionRecorded, steps_s=dict(steps), errors=dict(errors))
    return event
