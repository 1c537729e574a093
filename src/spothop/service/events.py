"""The event stream, one job's or every job's: ``spothop events`` and ``GET /v1/jobs/{id}/events``.

:func:`stream_events` reads a page of :class:`~spothop.observe.events.EventStream` after a
cursor. The server hands the cursor out as text (:func:`cursor_text`) and reads it back
(:func:`cursor_from_text`); to a client it is opaque.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.store import JobStore
    from spothop.observe.events import Cursor, StreamEvent


@dataclass(frozen=True)
class EventPage:
    """Events in stream order, and the cursor that resumes after them: ``to_dict()`` is
    ``GET /v1/jobs/{id}/events``' ``{"events": …, "next": …}``; ``events --json`` prints each
    event's ``to_dict()`` on a line of its own."""

    events: tuple[StreamEvent, ...]
    next: Cursor

    def to_list(self) -> list[dict[str, Any]]:
        return [e.to_dict() for e in self.events]

    def to_dict(self) -> dict[str, Any]:
        return {"events": self.to_list(), "next": cursor_text(self.next)}


def stream_events(
    store: JobStore, job_id: str | None, cursor: Cursor | None = None, limit: int | None = None
) -> EventPage:
    """The event stream after ``cursor`` (none: from the start), one job's or every job's (with
    ``limit``: at most that many events, and a cursor that resumes after them). An unknown job
    is :class:`~spothop.observe.job_report.UnknownJob` naming the nearest ids."""
    from spothop.observe.events import EventStream
    from spothop.observe.job_report import find_job

    if job_id is not None:
        find_job(store, job_id)
    batch, nxt = EventStream(store).read(job_id, cursor, limit=limit)
    return EventPage(tuple(batch), nxt)


def cursor_text(cursor: Cursor) -> str:
    """``cursor`` as the opaque text the server hands out (URL-safe base64 of its JSON)."""
    data = {
        "job_seq": cursor.job_seq,
        "agent_received_unix_s": cursor.agent_received_unix_s,
        "agent_ids": sorted(cursor.agent_ids),
    }
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


def cursor_from_text(text: str | None) -> Cursor | None:
    """The cursor of :func:`cursor_text`'s ``text`` (none or "": from the start);
    :class:`~spothop.errors.ConfigError` for text the server did not give."""
    from spothop.errors import ConfigError
    from spothop.observe.events import Cursor

    if not text:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(text.encode()))
        return Cursor(
            int(data["job_seq"]),
            float(data["agent_received_unix_s"]),
            frozenset(str(i) for i in data["agent_ids"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"after_id is not a cursor this server gave ({type(exc).__name__}); pass the 'next' of"
            " the previous answer, or none to read from the start"
        ) from None
