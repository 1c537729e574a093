"""The job store's events: read the ``job_events`` log, and record an event that changes no state.

Part of :class:`~spothop.jobs.store.JobStore`. Events that go with a change are
written by that change (``StoreBase._event``, in its transaction); here:

- :meth:`EventRows.record_event` records one on its own (fenced on a fenced view);
- :meth:`EventRows.events` reads them in ``seq`` order: one job's, every job's, or
  those of a set of jobs (an ``IN`` list up to :data:`MAX_IN_IDS` ids, else pages
  of :data:`EVENT_PAGE` events filtered here), the first or the newest ``limit``;
- :meth:`EventRows.last_event_seq` is the newest ``seq``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import func, select

from spothop.jobs.errors import JobNotFound
from spothop.jobs.records import JobEvent
from spothop.jobs.store.base import StoreBase
from spothop.state.job_tables import job_events

# Job ids put in a query's IN list at most (SQLite and PostgreSQL bound a statement's parameters);
# a longer filter is applied to pages of EVENT_PAGE events instead.
MAX_IN_IDS = 1000
EVENT_PAGE = 1000


class EventRows(StoreBase):
    """Job events (see the module)."""

    def record_event(self, job_id: str, kind: str, data: Mapping[str, Any] | None = None) -> int:
        """Record an event that changes no state (a notice seen, a launch error); returns its seq."""
        with self._engine.begin() as conn:
            if not self._has_job(conn, job_id):
                raise JobNotFound(job_id)
            now = self._clock()
            self._fence(conn, job_id, now)
            return self._event(conn, job_id, now, kind, data or {})

    def events(
        self,
        job_id: str | None = None,
        *,
        after_seq: int = 0,
        limit: int | None = None,
        job_ids: Collection[str] | None = None,
        newest: bool = False,
    ) -> list[JobEvent]:
        """Events with ``seq > after_seq`` in order: one job's, or every job's (``job_id`` None),
        or those of ``job_ids``; with ``limit``, the first that many, or with ``newest`` the last
        (still in order: the dashboard's opening page, chosen by the database, not read whole)."""
        t = job_events
        wanted = None if job_ids is None else set(job_ids)
        query = select(t).where(t.c.seq > after_seq)
        if job_id is not None:
            query = query.where(t.c.job_id == job_id)
        if wanted is not None and len(wanted) <= MAX_IN_IDS:
            query, wanted = query.where(t.c.job_id.in_(sorted(wanted))), None
        query = query.order_by(t.c.seq.desc() if newest else t.c.seq)
        rows: list[JobEvent] = []
        with self._engine.connect() as conn:
            seen_seq: int | None = None
            while True:  # one query, or (a filter too long for a query) page after page
                page = (
                    query
                    if seen_seq is None
                    else query.where(t.c.seq < seen_seq if newest else t.c.seq > seen_seq)
                )
                size = limit if wanted is None else EVENT_PAGE
                got = list(conn.execute(page if size is None else page.limit(size)))
                rows += [
                    JobEvent(r.seq, r.job_id, r.time_unix_s, r.kind, json.loads(r.data))
                    for r in got
                    if wanted is None or r.job_id in wanted
                ]
                if wanted is None or not got or (limit is not None and len(rows) >= limit):
                    break
                seen_seq = got[-1].seq
        rows = rows if limit is None else rows[:limit]
        return rows[::-1] if newest else rows

    def last_event_seq(self) -> int:
        """The newest job event's ``seq`` (0: none yet)."""
        with self._engine.connect() as conn:
            return int(conn.execute(select(func.max(job_events.c.seq))).scalar() or 0)
