"""Where the agent's events go: the instance's own log first, then the control plane.

:meth:`Reporter.report` builds the event from its model with the instance's
identity filled in (instance, provider, region, zone, instance type, job,
worker), appends it to ``events.jsonl`` and hands it to
:meth:`ControlPlane.record`. A control plane that fails is logged, never
raised: the local log already has the event, and the HTTP control plane
spools it for later.

While :meth:`Reporter.hold` is on (the emergency protocol, until the leases
are released) events reach the local log at once but wait for the control
plane until :meth:`Reporter.send_held`: the leases go back before anything
else is sent.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any, TypeVar

from spothop.agent.events import EventLog
from spothop.wire.contract import ControlPlane
from spothop.wire.events import AgentEvent, Stamp

log = logging.getLogger(__name__)

E = TypeVar("E", bound=AgentEvent)


class Reporter:
    """Builds, logs and sends this instance's events."""

    def __init__(self, events: EventLog, plane: ControlPlane, stamp: Stamp) -> None:
        self.events = events
        self.plane = plane
        self.stamp = stamp
        self._held: list[AgentEvent] | None = None
        self._lock = threading.Lock()

    def identify(self, **fields: str) -> None:
        """Fill in what the self-check learnt (empty values keep what was known)."""
        self.stamp = replace(self.stamp, **{k: v for k, v in fields.items() if v})

    def report(self, cls: type[E], **fields: Any) -> E:
        event = cls(**{**self.stamp.__dict__, **fields})
        self.events.write(event)
        with self._lock:
            if self._held is not None:
                self._held.append(event)
                return event
        self._send(event)
        return event

    def hold(self) -> None:
        with self._lock:
            if self._held is None:
                self._held = []

    def send_held(self) -> None:
        with self._lock:
            held, self._held = self._held or [], None
        for event in held:
            self._send(event)

    def _send(self, event: AgentEvent) -> None:
        try:
            self.plane.record(event)
        except (
            Exception
        ) as exc:  # the local log has it; a control plane that is down must not stop the agent
            log.warning(
                "the control plane did not take event %s (%s): %s", event.kind, event.event_id, exc
            )
