"""Fold what was observed (agents' events, provider listings) into the attempts it is about.

The first step of every ``decide`` pass, pure like the rest: each live
attempt is brought up to date with the events about its instance (oldest
first) and then with the provider's view of that instance, and every change
becomes the :class:`UpdateAttempt` or :class:`EndAttempt` that persists it.
The rules of ``decide`` then read the folded attempts only, so they give the
same answer whether an event arrived in this pass or was stored long ago.

What each observation means for a live attempt:

============================  ===============================================
observation                   the attempt
============================  ===============================================
``self_check`` blind,         ``notice_blind`` (kept off spot per tolerance)
``notice_blind``
``worker_started``            ``running`` (``running_at`` the event's time)
``advance_notice``            ``noticed``, ``notice_final`` False
``final_notice``,             ``noticed``, ``notice_final`` True, the deadline
``interruption``
``exited`` 0                  ended ``succeeded`` (exit code 0)
``exited`` 75                 ended ``superseded`` if a later attempt of its
                              node is live (a make-before-break handover),
                              ``preempted`` after a notice, else ``requeued``
                              (the worker asked to be relaunched)
``exited`` other              ended ``worker_failed`` with the worker's own
                              code (``worker_exited``: the agent's 1 only
                              says it failed; a worker's 75 is as above)
instance pending / running    ``pending`` / ``running``
instance noticed              ``noticed``, final, the instance's deadline
instance preempted            ended ``preempted``
instance terminated / failed  ended ``terminated`` / ``failed`` (but an exit code
                              its agent reported wins: exited, as above)
instance missing (its         ended ``preempted`` if it was noticed, else
provider listed)              ``failed``
its agent silent (no          ended ``agent_lost`` (:mod:`.liveness`; the
registration by the boot      orphan rule terminates the instance)
deadline, heartbeats stopped)
launching, no instance after  ended ``launch_failed``
``launch_timeout_s``, or
stored before this controller
started (a crash mid-launch)
an instance tagged with the   adopted: its ``instance_id`` recorded
attempt's token
============================  ===============================================

Events about an instance no live attempt names are ignored here (the
orphan rule in ``decide`` looks at instances, not events).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spothop.jobs.controller.actions import Action, EndAttempt, UpdateAttempt
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.group import current_of, lost_before_rendezvous, members_of
from spothop.jobs.controller.liveness import lost_why
from spothop.jobs.controller.snapshot import (
    CONTROL_PLANE_PROTOCOL,
    LAUNCH_CUT,
    TAG_TOKEN,
    AttemptView,
    JobView,
    Snapshot,
)
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.providers.base import Instance, InstanceState
from spothop.wire.contract import EXIT_DONE, EXIT_PREEMPTED
from spothop.wire.events import (
    AdvanceNotice,
    AgentEvent,
    Exited,
    FinalNotice,
    Interruption,
    NoticeBlind,
    SelfCheckEvent,
    WorkerExited,
    WorkerStarted,
)

_ENDS = {
    InstanceState.PREEMPTED: EndReason.PREEMPTED,
    InstanceState.TERMINATED: EndReason.TERMINATED,
    InstanceState.FAILED: EndReason.FAILED,
}
_TAKEN = (InstanceState.NOTICED, InstanceState.PREEMPTED)  # the cloud's doing


@dataclass
class _Change:
    """One attempt's changes in this pass: fields, a new state, or an end."""

    view: AttemptView
    fields: dict[str, object] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    end: EndAttempt | None = None
    # A grouped task's attempt whose generation already lost another node: however its worker
    # ends now (a collective broke under it), it ends with its group, not as a failure of its own.
    group_broken: bool = False
    # The worker's own exit code, from its agent's ``worker_exited``: the agent exits 1 for a
    # worker that failed however it exited, and the attempt keeps the code the worker gave.
    worker_code: int | None = None
    worker_phase: str = ""  # the phase of the job's command the worker exited in (setup, run)
    # The provider lists its instance noticed or preempted: a 75 is the cloud's doing even when
    # the agent's notice event is not (yet) stored.
    cloud_took: bool = False

    def set(self, reason: str, **changes: object) -> None:
        changes = {k: v for k, v in changes.items() if getattr(self.view, k) != v}
        if not changes:
            return
        self.view = self.view.with_(**changes)
        self.fields.update(changes)
        self.reasons.append(reason)

    def finish(
        self,
        reason: EndReason,
        at_s: float,
        detail: str,
        exit_code: int | None = None,
        error_code: str | None = None,
    ) -> None:
        if self.view.ended:
            return
        v = self.view
        self.end = EndAttempt(v.attempt_id, v.job_id, reason, at_s, detail, exit_code, error_code)
        self.view = v.with_(
            state=AttemptState.ENDED,
            ended_at=at_s,
            end_reason=reason,
            exit_code=exit_code if exit_code is not None else v.exit_code,
            error_code=error_code if error_code is not None else v.error_code,
            # A failed worker's line ("setup failed (exit 9)") is its message, as the store
            # keeps it (the executor), for the job's failure to say.
            error_message=detail if reason is EndReason.WORKER_FAILED else v.error_message,
        )

    def actions(self) -> list[Action]:
        out: list[Action] = []
        fields = {k: v for k, v in self.fields.items() if k != "state"}
        changed = self.fields.get("state")
        state = changed if isinstance(changed, AttemptState) else None
        # A notice folded in the pass that also ends the attempt is still written as the state it
        # was (``attempt_noticed``, then ``attempt_ended``): the agent did tell the controller before
        # the instance went, whether the two events reached one pass or two.
        noticed = state is AttemptState.NOTICED
        if (fields or state is not None) and not (self.end and not fields and not noticed):
            out.append(
                UpdateAttempt(
                    self.view.attempt_id,
                    self.view.job_id,
                    "; ".join(self.reasons),
                    state=None if self.end and not noticed else state,
                    fields=fields,
                )
            )
        if self.end is not None:
            out.append(self.end)
        return out


def fold(snapshot: Snapshot, config: ControllerConfig) -> tuple[tuple[JobView, ...], list[Action]]:
    """The snapshot's jobs with their live attempts brought up to date, and the actions that persist it."""
    events = _events_by_instance(snapshot.events)
    by_token = {
        inst.tags[TAG_TOKEN]: inst for inst in snapshot.instances.values() if TAG_TOKEN in inst.tags
    }
    jobs: list[JobView] = []
    actions: list[Action] = []
    for job in snapshot.jobs:
        grouped = job.spec.grouped
        changes = [_Change(_as_grouped(a) if grouped else a) for a in job.attempts]
        if grouped:
            broken = _broken_generations(job, snapshot)
            for change in changes:
                change.group_broken = any(
                    (change.view.generation, node) in broken and node != change.view.node
                    for node in range(job.node_count)
                )
        for change in changes:
            if change.view.alive:
                _fold_attempt(change, changes, snapshot, events, by_token, config, grouped)
        for change in changes:
            actions.extend(change.actions())
        jobs.append(job.with_(attempts=tuple(c.view for c in changes)))
    return tuple(jobs), actions


def _as_grouped(view: AttemptView) -> AttemptView:
    """A grouped task's node stopped with its group: its agent's report of the controller's own
    stop is not the cloud's notice (not an interruption, no cooldown); docs/multinode.md."""
    if view.notice_final and view.notice_by_controller:
        return view.with_(notice_final=False)
    return view


def _broken_generations(job: JobView, snapshot: Snapshot) -> frozenset[tuple[int, int]]:
    """(generation, node) of a grouped task's members lost or noticed by the cloud: ended other
    than done or stopped, noticed, or an instance its provider lists as ended or lists no more.
    A node replaced within its generation (lost before it ever registered: it met no one,
    group.py rule 4) broke nothing: its successor is the node."""
    out: set[tuple[int, int]] = set()
    generations = {a.generation for a in job.attempts}
    current = {c.attempt_id for g in generations for c in current_of(members_of(job, g))}
    for a in job.attempts:
        if a.attempt_id not in current and lost_before_rendezvous(a):
            continue
        if a.ended:
            lost = a.end_reason not in (EndReason.SUCCEEDED, EndReason.SUPERSEDED)
        elif a.notice_final or a.state is AttemptState.NOTICED:
            lost = True
        elif a.instance_id is not None and a.provider in snapshot.listed_providers:
            instance = snapshot.instances.get(a.instance_id)
            lost = instance is None or not instance.state.is_alive
        else:
            lost = False
        if lost:
            out.add((a.generation, a.node))
    return frozenset(out)


def _events_by_instance(events: Sequence[AgentEvent]) -> Mapping[str, list[AgentEvent]]:
    out: dict[str, list[AgentEvent]] = defaultdict(list)
    for event in events:
        out[event.instance_id].append(event)
    return out


def _fold_attempt(
    change: _Change,
    siblings: Sequence[_Change],
    snapshot: Snapshot,
    events: Mapping[str, list[AgentEvent]],
    by_token: Mapping[str, Instance],
    config: ControllerConfig,
    grouped: bool = False,
) -> None:
    view = change.view
    if view.instance_id is None:
        adopted = by_token.get(view.launch_token)
        if adopted is None:
            if _cut_by_a_crash(view, snapshot):
                change.finish(
                    EndReason.LAUNCH_FAILED,
                    snapshot.now,
                    "its launch was cut short: the controller that made it stopped, and no"
                    " instance carries its token",
                    error_code=LAUNCH_CUT,
                )
            elif snapshot.now - view.launched_at > config.launch_timeout_s:
                change.finish(
                    EndReason.LAUNCH_FAILED,
                    snapshot.now,
                    f"no instance appeared within {config.launch_timeout_s:.0f} s of the launch",
                )
            return
        change.set(f"adopted instance {adopted.instance_id}", instance_id=adopted.instance_id)
    instance_id = change.view.instance_id
    assert instance_id is not None
    listed = snapshot.instances.get(instance_id)
    change.cloud_took = listed is not None and listed.state in _TAKEN
    for event in events.get(instance_id, ()):
        _apply_event(change, siblings, event, grouped)
        if change.view.ended:
            return
    _apply_instance(change, siblings, snapshot, config, grouped)
    if (lost := lost_why(change.view, snapshot, config)) is not None:
        change.finish(EndReason.AGENT_LOST, snapshot.now, lost)


def _cut_by_a_crash(view: AttemptView, snapshot: Snapshot) -> bool:
    """A launching attempt stored before this controller started, its provider listed, no instance,
    and no launch of this controller's in flight for its node (``Snapshot.launching``: a launch
    time moved from the provider's clock can read up to an observe's length early, so one made
    just after the controller started could read as older than it).

    No launch call of this controller can be making it, so the one that did died
    mid-launch: before the call (nothing started) or after it, before the instance
    id was stored — then the listing shows the instance by its token and it is
    adopted instead. A listing that lags (EC2's, up to a minute) shows it later,
    tagged with an ended attempt's token: the orphan rule terminates it. Waiting
    ``launch_timeout_s`` instead would hold the node for 15 minutes.
    """
    if (view.job_id, view.node) in snapshot.launching:
        return False  # this controller's own call is making it (its time may read early)
    started = snapshot.started_for(view.job_id)
    return (
        started is not None
        and view.launched_at < started
        and view.state is AttemptState.LAUNCHING
        and view.provider in snapshot.listed_providers
    )


def _apply_event(
    change: _Change, siblings: Sequence[_Change], event: AgentEvent, grouped: bool = False
) -> None:
    t = event.time_unix_s
    if (
        grouped
        and isinstance(event, FinalNotice | Interruption)
        and event.protocol == CONTROL_PLANE_PROTOCOL
    ):
        change.set("stopped with its group", notice_by_controller=True)
        return
    if isinstance(event, NoticeBlind) or (isinstance(event, SelfCheckEvent) and event.notice_blind):
        change.set(
            f"notice-blind ({', '.join(event.reasons) or 'its agent says so'})", notice_blind=True
        )
    elif isinstance(event, WorkerStarted):
        if change.view.state in (AttemptState.LAUNCHING, AttemptState.PENDING):
            change.set("its worker started", state=AttemptState.RUNNING, running_at=t)
    elif isinstance(event, AdvanceNotice):
        if not change.view.notice_final:
            change.set(
                f"advance notice ({event.cause or event.protocol})",
                state=AttemptState.NOTICED,
                noticed_at=change.view.noticed_at if change.view.noticed_at is not None else t,
                notice_deadline_s=event.deadline_unix_s,
            )
    elif isinstance(event, FinalNotice | Interruption):
        first = not change.view.notice_final
        change.set(
            f"final notice ({event.cause or event.protocol})",
            state=AttemptState.NOTICED,
            noticed_at=t if first else change.view.noticed_at,
            notice_final=True,
            notice_deadline_s=event.deadline_unix_s,
            # The control plane's own stop request, reported as a notice: not the cloud's.
            notice_by_controller=(
                event.protocol == CONTROL_PLANE_PROTOCOL
                if first
                else change.view.notice_by_controller
            ),
        )
    elif isinstance(event, WorkerExited):
        change.worker_code = event.code
        change.worker_phase = event.phase
    elif isinstance(event, Exited):
        _apply_exit(change, siblings, _worker_code(change, event.code), t, grouped)


def _worker_code(change: _Change, agent_code: int) -> int:
    """The exit code an attempt ends with: the agent's when it says done (0) or preempted,
    resumable (75), else the worker's own (75 included: resumable, relaunched), as the
    worker gave it (the agent's 1 says only that it failed)."""
    if agent_code in (EXIT_DONE, EXIT_PREEMPTED):
        return agent_code
    if change.worker_code is not None:
        return change.worker_code
    return change.view.exit_code if change.view.exit_code is not None else agent_code


def _apply_exit(
    change: _Change, siblings: Sequence[_Change], code: int, at_s: float, grouped: bool = False
) -> None:
    view = change.view
    if code == EXIT_DONE:
        change.finish(EndReason.SUCCEEDED, at_s, "the worker finished (exit 0)", code)
    elif (
        code == EXIT_PREEMPTED
        and grouped
        and not view.notice_final
        and (view.stop_requested_at is not None or view.notice_by_controller)
    ):
        change.finish(EndReason.SUPERSEDED, at_s, "stopped with its group (exit 75)", code)
    elif grouped and change.group_broken and not view.notice_final:
        why = f"ended with its group (exit {code}): another node of generation {view.generation} was lost"
        change.finish(EndReason.SUPERSEDED, at_s, why, code)
    elif code == EXIT_PREEMPTED:
        successor = any(
            s.view.alive
            and s.view.node == view.node
            and s.view.attempt_id != view.attempt_id
            and (s.view.launched_at, s.view.attempt_id) > (view.launched_at, view.attempt_id)
            for s in siblings
        )
        if successor and not view.notice_final:
            change.finish(
                EndReason.SUPERSEDED, at_s, "handed over to its replacement (exit 75)", code
            )
        elif successor:  # the cloud takes it back: an interruption, survived make-before-break
            change.finish(
                EndReason.PREEMPTED, at_s, "preempted, handed over to its replacement", code
            )
        elif view.stop_requested_at is not None and not view.notice_final:
            change.finish(EndReason.TERMINATED, at_s, "stopped on request (exit 75)", code)
        elif view.noticed_at is None and not change.cloud_took:  # the worker's own 75
            why = "the worker asked to be relaunched (exit 75) with no notice from the cloud"
            change.finish(EndReason.REQUEUED, at_s, why, code)
        else:
            change.finish(EndReason.PREEMPTED, at_s, "preempted, resumable (exit 75)", code)
    elif (change.worker_phase or change.view.worker_phase) == "setup":  # run never started
        change.finish(EndReason.WORKER_FAILED, at_s, f"setup failed (exit {code})", code)
    else:
        change.finish(EndReason.WORKER_FAILED, at_s, f"the worker failed (exit {code})", code)


def _apply_instance(
    change: _Change,
    siblings: Sequence[_Change],
    snapshot: Snapshot,
    config: ControllerConfig,
    grouped: bool = False,
) -> None:
    view = change.view
    if view.provider not in snapshot.listed_providers:
        return  # its provider did not answer this pass: unknown, not gone
    instance = snapshot.instances.get(view.instance_id or "")
    now = snapshot.now
    if instance is None:
        if (
            view.state in (AttemptState.LAUNCHING, AttemptState.PENDING)
            and now - view.launched_at <= config.listing_grace_s
        ):
            # Accepted a moment ago (its launch may have returned its id already: pending); the
            # listing may not show it yet. Ended as gone here, it would never be terminated.
            return
        if view.exit_code is not None:  # its agent's exit was stored before the instance went
            _apply_exit(change, siblings, view.exit_code, now, grouped)
        elif view.notice_final or view.state is AttemptState.NOTICED:
            change.finish(EndReason.PREEMPTED, now, "its instance is gone after a notice")
        else:
            change.finish(
                EndReason.FAILED, now, "its instance is gone (not listed by its provider)"
            )
        return
    state = instance.state
    if state in _ENDS:
        at = instance.ended_at or instance.termination_time or now
        if view.exit_code is not None:  # its agent's exit was stored before the instance ended
            _apply_exit(change, siblings, view.exit_code, at, grouped)
        else:
            # A failed instance says why (a boot script that failed: its console's last line).
            failed = state is InstanceState.FAILED and instance.state_reason
            why = f": {instance.state_reason}" if failed else ""
            change.finish(_ENDS[state], at, f"its instance is {state.value}{why}")
        return
    if state is InstanceState.PENDING and view.state is AttemptState.LAUNCHING:
        change.set("its instance was accepted", state=AttemptState.PENDING)
    elif state is InstanceState.RUNNING and view.state in (
        AttemptState.LAUNCHING,
        AttemptState.PENDING,
    ):
        change.set("its instance runs", state=AttemptState.RUNNING, running_at=now)
    elif state is InstanceState.NOTICED and not view.notice_final:
        change.set(
            "its instance got an interruption notice",
            state=AttemptState.NOTICED,
            noticed_at=instance.notice_time if instance.notice_time is not None else now,
            notice_final=True,
            notice_deadline_s=instance.termination_time,
        )
