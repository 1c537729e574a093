"""Scheduled maintenance on the local cloud: events a user schedules, the host serves and carries out.

A real cloud schedules maintenance days ahead (AWS: ``instance-stop``,
``instance-retirement``, ``system-reboot``… on
``events/maintenance/scheduled``). Here a user schedules one with
:meth:`~spothop.providers.local.provider.LocalProvider.schedule_maintenance`
(``spothop cloud maintenance INSTANCE --code instance-stop --in 600``), to
see what their job does with the advance notice and with the event itself.

Contracts:

- The events live in the instance's record (column ``scheduled_events``, a
  JSON list), written by the provider; the instance's host mirrors them onto
  its metadata endpoint every tick (:func:`events_of`).
- Only codes the instance's metadata protocol serves are accepted
  (``MetadataHandler.MAINTENANCE_CODES``); a protocol with none refuses every
  code with a :class:`~spothop.errors.ConfigError` naming the protocol.
- Times are on the cloud's clock (simulated seconds, as every local-cloud time).
- At ``not_before`` an event whose code ends the instance
  (``MetadataHandler.MAINTENANCE_ENDS``: a stop or a retirement) is carried
  out as a shutdown is: SIGTERM to the instance's processes, the cloud's
  terminate grace, SIGKILL; the instance ends ``terminated`` and the event
  reads ``completed``. Other codes (reboots, system maintenance) are notices
  only: the instance keeps running and the event completes at ``not_after``.
- A canceled event stays listed as ``canceled``, as EC2 keeps its history.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from spothop.errors import ConfigError
from spothop.providers.local.metadata import PROTOCOLS, ScheduledEvent

DEFAULT_WINDOW_S = (
    3600.0  # how long an event may run after NotBefore unless told (EC2 windows run about an hour)
)


def events_of(row: dict[str, Any]) -> list[ScheduledEvent]:
    """The scheduled events kept in an instance's record (none for a record written before they existed)."""
    raw = row.get("scheduled_events") or "[]"
    return [ScheduledEvent(**fields) for fields in json.loads(raw)]


def encode(events: Sequence[ScheduledEvent]) -> str:
    """The ``scheduled_events`` column's value for ``events``."""
    return json.dumps([asdict(e) for e in events], separators=(",", ":"))


def new_event(
    protocol: str, code: str, not_before: float, window_s: float, description: str
) -> ScheduledEvent:
    """A new active event in ``protocol``'s terms; ConfigError for a code or times it cannot take."""
    handler = PROTOCOLS[protocol]
    if not handler.MAINTENANCE_CODES:
        raise ConfigError(
            f"the {protocol} metadata protocol serves no scheduled maintenance events"
        )
    if code not in handler.MAINTENANCE_CODES:
        raise ConfigError(
            f"--code {code!r} is not a scheduled event of the {protocol} protocol; use one of "
            f"{', '.join(sorted(handler.MAINTENANCE_CODES))}"
        )
    if window_s < 0:
        raise ConfigError(f"--window must be ≥ 0 seconds, got {window_s}")
    return ScheduledEvent(
        handler.new_event_id(),
        code,
        not_before,
        not_before + window_s,
        description=description or handler.maintenance_description(code),
    )


def cancel(events: Sequence[ScheduledEvent], event_id: str | None) -> list[ScheduledEvent]:
    """``events`` with ``event_id`` (None: every active one) canceled; ConfigError for an id that is not active."""
    active = {e.event_id for e in events if e.state == "active"}
    if event_id is not None and event_id not in active:
        known = ", ".join(sorted(active)) or "none"
        raise ConfigError(
            f"no active scheduled event {event_id!r} on this instance (active: {known})"
        )
    return [
        replace(e, state="canceled")
        if e.event_id in active and event_id in (None, e.event_id)
        else e
        for e in events
    ]


def advance(
    protocol: str, events: Sequence[ScheduledEvent], now: float
) -> tuple[list[ScheduledEvent], ScheduledEvent | None]:
    """The events as they stand at ``now``, and the event that ends the instance now, if one does.

    An ending event due now is marked completed and returned; any other active
    event past its ``not_after`` is marked completed.
    """
    ends = PROTOCOLS[protocol].MAINTENANCE_ENDS
    out: list[ScheduledEvent] = []
    ending: ScheduledEvent | None = None
    for event in events:
        if (
            event.state == "active"
            and ending is None
            and event.code in ends
            and now >= event.not_before
        ):
            ending = event = replace(event, state="completed")
        elif event.state == "active" and now >= event.not_after:
            event = replace(event, state="completed")
        out.append(event)
    return out, ending
