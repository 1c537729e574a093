"""What one local instance's metadata endpoint knows: who it is, and which notices it has had.

:class:`InstanceMetadata` is fixed at launch. :class:`NoticeState` is what the
local cloud changes while the instance runs (a rebalance recommendation, a
termination notice, a maintenance event) and what the protocol handlers read.
The handlers never keep notice state of their own, so one ``NoticeState`` can
be served in any cloud's dialect and the host sees the same facts.

Contracts:

- Every time the handlers print comes from this state and its injected clock
  ``now()``; nothing here or in the handlers reads ``time.time()`` directly,
  so a simulated clock that runs faster than the wall is honoured end to end.
- The handlers print times on the *instance's* clock: :meth:`NoticeState.snapshot`
  passes every time through ``instance_time`` (default: the cloud's clock is the
  instance's). An instance's processes read their operating system's clock, the
  wall; on an accelerated world the host maps the cloud's simulated times to the
  wall instants it acts at, so a watcher that computes ``deadline − time.time()``
  gets the wall seconds it really has (a 120 s notice at speed 30: 4 s), and
  nothing on the instance needs to know the world is simulated.
- A notice is visible to the endpoints as soon as it is recorded; the host
  calls :meth:`NoticeState.schedule_termination` at the moment the notice is
  issued (``notice_at`` is that moment on the host's clock).
- Every change bumps :attr:`NoticeState.version` and wakes
  :meth:`NoticeState.wait_for_change`; the wait itself is in wall seconds,
  because it holds a real HTTP request open.
- Azure's ``DocumentIncarnation`` changes only when the scheduled-events
  document changes (a preemption is scheduled, an event is acknowledged).
- Scheduled maintenance events (:class:`ScheduledEvent`, AWS's
  ``events/maintenance/scheduled``) are set as a whole list by the host
  (:meth:`NoticeState.set_scheduled_events`), mirrored from the cloud's
  records, so the endpoint shows exactly what the cloud has scheduled.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

Clock = Callable[[], float]

MAINTENANCE_NONE = "NONE"
MAINTENANCE_TERMINATE = "TERMINATE_ON_HOST_MAINTENANCE"
MAINTENANCE_MIGRATE = "MIGRATE_ON_HOST_MAINTENANCE"
# GCP's instance/maintenance-event values (cloud.google.com/compute/docs/instances/host-maintenance-overview)
MAINTENANCE_EVENTS = frozenset({MAINTENANCE_NONE, MAINTENANCE_TERMINATE, MAINTENANCE_MIGRATE})


@dataclass(frozen=True)
class InstanceMetadata:
    """Who the instance is, as its cloud spells it. Fixed for the instance's life.

    ``launch_time`` is unix seconds on the local cloud's clock. ``project_id``
    only shows in GCP's resource paths (``projects/<p>/zones/<zone>``).
    ``private_address`` is its address on the cloud's private network, served where each
    cloud's endpoint serves it: every local instance is a process of this one machine, so
    its peers reach it on the loopback.
    """

    instance_id: str
    instance_type: str
    region: str
    zone: str
    provider: str
    launch_time: float
    spot: bool = True
    project_id: str = "spothop-local"
    private_address: str = "127.0.0.1"


SCHEDULED_EVENT_STATES = frozenset(
    {"active", "completed", "canceled"}
)  # EC2 scheduled-event states


@dataclass(frozen=True)
class ScheduledEvent:
    """One scheduled maintenance event: ``code`` (as the protocol spells it, e.g. ``instance-stop``)
    may start from ``not_before`` and ends by ``not_after`` (unix seconds on the cloud's clock).

    ``state`` is one of :data:`SCHEDULED_EVENT_STATES`; a completed or
    canceled event stays listed as history. ``ValueError`` for an empty code,
    an unknown state or a window that ends before it starts.
    """

    event_id: str
    code: str
    not_before: float
    not_after: float
    state: str = "active"
    description: str = ""

    def __post_init__(self) -> None:
        if not self.code:
            raise ValueError("a scheduled event needs a code")
        if self.state not in SCHEDULED_EVENT_STATES:
            raise ValueError(
                f"scheduled event state {self.state!r} is not one of {sorted(SCHEDULED_EVENT_STATES)}"
            )
        if self.not_after < self.not_before:
            raise ValueError(
                f"scheduled event {self.event_id}: not_after {self.not_after} is before not_before {self.not_before}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (times in unix seconds of the cloud's clock)."""
        return asdict(self)


@dataclass(frozen=True)
class NoticeSnapshot:
    """One consistent reading of a :class:`NoticeState` (all fields from the same moment)."""

    version: int
    now: float
    advance_notice_time: float | None
    termination_time: float | None
    notice_time: float | None
    maintenance_event: str
    document_incarnation: int
    event_id: str | None
    acknowledged: bool
    acknowledged_at: float | None
    scheduled_events: tuple[ScheduledEvent, ...] = ()

    @property
    def preempted(self) -> bool:
        """A termination notice has been issued (GCP's ``preempted`` reads TRUE from then on)."""
        return self.termination_time is not None


def _same_time(t: float) -> float:
    return t


class NoticeState:
    """The notices one instance has had, shared between the host and its endpoint's threads.

    Thread-safe: every method takes the one lock. Times are unix-second floats
    on ``clock`` (default ``time.time``); :meth:`snapshot` shows them on the
    instance's clock, ``instance_time(t)`` (default: the same). The host writes with
    :meth:`recommend_rebalance`, :meth:`schedule_termination` and
    :meth:`set_maintenance`; the instance writes only with :meth:`acknowledge`
    (Azure's StartRequests), which the host may read (:attr:`acknowledged`) to
    proceed before ``NotBefore``.
    """

    def __init__(
        self, clock: Clock = time.time, *, instance_time: Callable[[float], float] | None = None
    ) -> None:
        self._clock = clock
        self._shown = instance_time or _same_time
        self._changed = threading.Condition(threading.Lock())
        self._version = 0
        self._advance_notice_time: float | None = None
        self._termination_time: float | None = None
        self._notice_time: float | None = None
        self._maintenance_event = MAINTENANCE_NONE
        self._document_incarnation = 0
        self._event_id: str | None = None
        self._acknowledged_at: float | None = None
        self._scheduled_events: tuple[ScheduledEvent, ...] = ()

    # -- reading -------------------------------------------------------------

    def now(self) -> float:
        """The current time on the injected clock (unix seconds)."""
        return self._clock()

    def snapshot(self) -> NoticeSnapshot:
        """Every field at once, read under the lock; its times on the instance's clock."""
        shown = self._shown

        def maybe(t: float | None) -> float | None:
            return None if t is None else shown(t)

        with self._changed:
            return NoticeSnapshot(
                version=self._version,
                now=shown(self._clock()),
                advance_notice_time=maybe(self._advance_notice_time),
                termination_time=maybe(self._termination_time),
                notice_time=maybe(self._notice_time),
                maintenance_event=self._maintenance_event,
                document_incarnation=self._document_incarnation,
                event_id=self._event_id,
                acknowledged=self._acknowledged_at is not None,
                acknowledged_at=maybe(self._acknowledged_at),
                scheduled_events=tuple(
                    dataclasses.replace(
                        e, not_before=shown(e.not_before), not_after=shown(e.not_after)
                    )
                    for e in self._scheduled_events
                ),
            )

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    @property
    def advance_notice_time(self) -> float | None:
        with self._changed:
            return self._advance_notice_time

    @property
    def termination_time(self) -> float | None:
        with self._changed:
            return self._termination_time

    @property
    def notice_time(self) -> float | None:
        with self._changed:
            return self._notice_time

    @property
    def maintenance_event(self) -> str:
        with self._changed:
            return self._maintenance_event

    @property
    def document_incarnation(self) -> int:
        with self._changed:
            return self._document_incarnation

    @property
    def event_id(self) -> str | None:
        with self._changed:
            return self._event_id

    @property
    def acknowledged(self) -> bool:
        """The instance approved the scheduled event (Azure StartRequests): the host may proceed."""
        with self._changed:
            return self._acknowledged_at is not None

    @property
    def acknowledged_at(self) -> float | None:
        with self._changed:
            return self._acknowledged_at

    @property
    def scheduled_events(self) -> tuple[ScheduledEvent, ...]:
        with self._changed:
            return self._scheduled_events

    # -- writing -------------------------------------------------------------

    def recommend_rebalance(self, at: float | None = None) -> None:
        """Record an advance notice (AWS rebalance recommendation) issued at ``at`` (default: now).

        A second call keeps the first time: the cloud recommends once.
        """
        with self._changed:
            if self._advance_notice_time is not None:
                return
            self._advance_notice_time = self._clock() if at is None else float(at)
            self._bump()

    def schedule_termination(self, notice_at: float | None, terminate_at: float) -> str:
        """Record a final notice issued at ``notice_at`` (default: now) for ``terminate_at``.

        Returns the Azure event id of the preemption. Raises ``ValueError`` when
        the termination would come before its notice. Calling it again with the
        same times changes nothing; with other times it moves the termination
        (a new document incarnation, the same event id, the acknowledgement kept).
        """
        with self._changed:
            issued = self._clock() if notice_at is None else float(notice_at)
            if terminate_at < issued:
                raise ValueError(
                    f"terminate_at {terminate_at} is before notice_at {issued}; a notice precedes its termination"
                )
            if self._event_id is None:
                self._event_id = str(uuid.uuid4()).upper()
            elif (self._notice_time, self._termination_time) == (issued, float(terminate_at)):
                return self._event_id
            self._notice_time = issued
            self._termination_time = float(terminate_at)
            self._document_incarnation += 1
            self._bump()
            return self._event_id

    def set_maintenance(self, value: str) -> None:
        """Set GCP's maintenance-event value; one of :data:`MAINTENANCE_EVENTS`, else ``ValueError``."""
        if value not in MAINTENANCE_EVENTS:
            raise ValueError(
                f"maintenance event {value!r} is not one of {sorted(MAINTENANCE_EVENTS)}"
            )
        with self._changed:
            if value != self._maintenance_event:
                self._maintenance_event = value
                self._bump()

    def set_scheduled_events(self, events: Iterable[ScheduledEvent]) -> None:
        """Replace the scheduled maintenance events (in the order given); a change bumps the version."""
        new = tuple(events)
        with self._changed:
            if new != self._scheduled_events:
                self._scheduled_events = new
                self._bump()

    def acknowledge(self, event_id: str) -> bool:
        """The instance approves event ``event_id`` (Azure StartRequests).

        Returns False (and changes nothing) for an id that is not the current
        event. Event ids compare case-insensitively, as GUIDs do. A repeated
        acknowledgement returns True and keeps the first time.
        """
        with self._changed:
            if self._event_id is None or event_id.strip().upper() != self._event_id:
                return False
            if self._acknowledged_at is None:
                self._acknowledged_at = self._clock()
                self._document_incarnation += 1
                self._bump()
            return True

    # -- waiting -------------------------------------------------------------

    def wait_for_change(self, version: int, timeout_s: float) -> int:
        """Block until :attr:`version` differs from ``version`` or ``timeout_s`` wall seconds pass.

        Returns the version then current (equal to ``version`` on a timeout).
        """
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._changed:
            while self._version == version:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self._version

    def _bump(self) -> None:
        # Caller holds the lock.
        self._version += 1
        self._changed.notify_all()
