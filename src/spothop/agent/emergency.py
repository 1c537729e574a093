"""The emergency protocol: what the agent does between a final notice and the kill.

Steps, each timed (``steps_s`` of the report):

1. ``stop`` — budget = deadline − now − safety margin (never negative). Write
   ``stop.json`` (the SDK's ``stop_requested()`` and ``seconds_left()``), then
   SIGTERM the worker's process group — unless the worker registered an
   ``on_stop`` callback, which the SDK runs on seeing ``stop.json``.
2. ``save`` — wait up to the budget for the worker to call ``saved()`` or to
   exit. Then the group is SIGKILLed: after the budget a worker that ignores
   the stop is not allowed to run on while its leases are handed back.
3. ``upload`` — the upload hook, if any.
4. ``release`` — the lease releaser, if any, for the worker's id.
5. ``record`` — the ``interruption`` event in ``events.jsonl`` first (local,
   fast), then each recorder (the store); an ``interruption_recorded`` event
   then carries every step's time, the record's own included.
6. ``acknowledge`` — tell the cloud the instance may go now (Azure's
   StartRequests): last, because the platform may take the VM at once.

A hook that raises is logged in ``errors`` and the next step runs: nothing
a worker or a hook does stops the leases from being released and the
interruption reported. The caller exits with ``EXIT_PREEMPTED``.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spothop.agent.control import ControlDir
from spothop.agent.events import EventLog
from spothop.agent.hooks import InterruptionRecorder, InterruptionReport, LeaseReleaser, Upload
from spothop.agent.model import Identity, Notice
from spothop.agent.supervisor import Supervisor

log = logging.getLogger(__name__)

SAVE_POLL_S = 0.02  # how often the agent looks for saved.json or the worker's exit


@dataclass(frozen=True)
class EmergencyContext:
    """What the protocol works with; hooks that are None are skipped (and reported as such)."""

    supervisor: Supervisor
    control: ControlDir
    events: EventLog
    identity: Identity
    cloud: str
    worker_id: str
    safety_margin_s: float
    releaser: LeaseReleaser | None = None
    upload: Upload | None = None
    recorders: Sequence[InterruptionRecorder] = ()
    acknowledge: Callable[[Notice], None] | None = None
    clock: Callable[[], float] = time.time


def run_emergency(notice: Notice, ctx: EmergencyContext) -> InterruptionReport:
    """Run every step for ``notice``; returns the report (already recorded)."""
    steps: dict[str, float] = {}
    errors: dict[str, str] = {}
    deadline = notice.deadline if notice.deadline is not None else ctx.clock()
    budget = max(0.0, deadline - ctx.clock() - ctx.safety_margin_s)
    start = time.monotonic()
    _deliver_stop(notice, ctx, deadline)
    steps["stop"] = time.monotonic() - start
    saved, detail = _wait_for_save(ctx, budget)
    ctx.supervisor.kill()
    steps["save"] = time.monotonic() - start - steps["stop"]
    _timed(steps, errors, "upload", ctx.upload)
    releaser = ctx.releaser
    released = _timed(steps, errors, "release",
                      (lambda: releaser.release_worker(ctx.worker_id)) if releaser is not None else None)
    ctx.events.write("leases_released", worker_id=ctx.worker_id, count=released,
                     error=errors.get("release"))
    report = InterruptionReport(
        cloud=ctx.cloud, region=ctx.identity.region, zone=ctx.identity.zone,
        instance_type=ctx.identity.instance_type, instance_id=ctx.identity.instance_id,
        worker_id=ctx.worker_id, protocol=notice.protocol, notice_kind=notice.kind.value, cause=notice.cause,
        notice_time=notice.notice_time, deadline=notice.deadline, lead_time_s=notice.lead_time_s,
        budget_s=budget, saved=saved, saved_detail=detail,
        uploaded=None if ctx.upload is None else "upload" not in errors,
        leases_released=released if isinstance(released, int) else None, steps_s=steps, errors=errors,
    )
    _record(report, ctx, steps, errors)
    if ctx.acknowledge is not None:
        acknowledge = ctx.acknowledge
        _timed(steps, errors, "acknowledge", lambda: acknowledge(notice))
    return report


def _deliver_stop(notice: Notice, ctx: EmergencyContext, deadline: float) -> None:
    ctx.control.request_stop(deadline, f"{notice.protocol}:{notice.cause}", notice.as_dict())
    if ctx.control.callback_mode():
        log.info("stop delivered to the worker's on_stop callback")
    elif ctx.supervisor.signal_group(signal.SIGTERM):
        log.info("SIGTERM sent to the worker's process group")


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


def _timed(steps: dict[str, float], errors: dict[str, str], name: str,
           action: Callable[[], object] | None) -> object:
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


def _record(report: InterruptionReport, ctx: EmergencyContext, steps: dict[str, float],
            errors: dict[str, str]) -> None:
    start = time.monotonic()
    ctx.events.write("interruption", **report.as_dict())
    steps["record"] = time.monotonic() - start
    for recorder in ctx.recorders:
        _timed(steps, errors, f"record:{type(recorder).__name__}", _bind(recorder, report))
    ctx.events.write("interruption_recorded", steps_s=dict(steps), errors=dict(errors))


def _bind(recorder: InterruptionRecorder, report: InterruptionReport) -> Callable[[], None]:
    return lambda: recorder.record(report)
