"""The interruption event stream: every lifecycle event, from the agents and the controller, in one stream.

The contract:

1. **Two sources, one shape.** The agents' typed events (``agent_events``,
   :mod:`spothop.wire.events`) and the controller's job events
   (``job_events``) come out as :class:`StreamEvent`: time, source, kind,
   job, instance, provider, zone, instance type, and where the event says
   them, the cause, the lead time, what was saved and how long saving took,
   and what went back to the queue to be recomputed (``leases_released``).
2. **Ordered by time**, then by source and position, so the same rows give
   the same stream; :meth:`EventStream.read` takes a :class:`Cursor` and
   returns the events after it with the next cursor (``--follow``), and
   given ``kinds``, only the events of those kinds, the others left in the
   database (:func:`stored_kinds`).
3. A controller event about an attempt (its ``attempt_id``) is stamped with
   that attempt's instance, provider, zone and type.
4. :func:`mtbf` is the mean time between interruptions per provider and
   instance type: running seconds (the ledger's, on the provider's clock,
   where it has them; else the attempts' own times) over the number of
   attempts the cloud interrupted (:attr:`~spothop.jobs.records.AttemptRecord.interrupted`). No interruption: ``mtbf_s`` None (none seen).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select

from spothop.jobs.records import AttemptRecord, JobEvent
from spothop.jobs.store import JobStore
from spothop.observe.ledger_record import LedgerRecord
from spothop.state.agent_tables import agent_events
from spothop.wire.errors import EventFormatError
from spothop.wire.events import AgentEvent, UnknownEvent, event_from_dict

SOURCE_AGENT = "agent"
SOURCE_CONTROLLER = "controller"
INTERRUPTION_KINDS = frozenset({"interruption", "final_notice", "advance_notice"})


@dataclass(frozen=True)
class StreamEvent:
    """One event of the stream (see the module's contract); ``data`` keeps the event whole."""

    time_unix_s: float
    source: str
    kind: str
    job_id: str
    instance_id: str | None = None
    provider: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    cause: str | None = None
    lead_time_s: float | None = None
    saved: str | None = None
    save_s: float | None = None
    recomputed_shards: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["data"] = dict(self.data)
        return out


@dataclass(frozen=True)
class Cursor:
    """How far a reader has read: the last job event's seq, the last agent event received."""

    job_seq: int = 0
    agent_received_unix_s: float = 0.0
    agent_ids: frozenset[str] = frozenset()  # events received at exactly that time, already read


class EventStream:
    """The stream over one job store's tables."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def read(
        self,
        job_id: str | None = None,
        cursor: Cursor | None = None,
        kinds: Collection[str] | None = None,
        attempts: Sequence[AttemptRecord] | None = None,
        limit: int | None = None,
    ) -> tuple[list[StreamEvent], Cursor]:
        """Events after ``cursor`` (all if None), one job's or every job's, in order; and the next cursor.

        ``kinds``: only the events of those kinds, chosen in the query where the rows say their
        kind, so that a reader of a few kinds (the report) does not read, parse and drop every
        other event of a job whose agents sent thousands. ``attempts``: the job's (every job's),
        when the caller has just read them. ``limit``: at most that many events, the first
        stored (:func:`_first_stored`); the next cursor follows the last of them, so that
        reading page after page with it gives every event once, each page in time order."""
        at = cursor or Cursor()
        if attempts is None:
            attempts = self.store.attempts(job_id)
        by_id = {a.attempt_id: a for a in attempts}
        by_instance = {a.instance_id: a for a in by_id.values() if a.instance_id}
        job_events = self.store.events(job_id, after_seq=at.job_seq, limit=limit)
        rows = self._agent_rows(job_id, set(by_instance), at, kinds, limit)
        if limit is not None:
            job_events, rows = _first_stored(job_events, rows, limit)
        out = [
            _from_job_event(e.time_unix_s, e.kind, e.job_id, e.data, by_id)
            for e in job_events
            if kinds is None or e.kind in kinds
        ]
        for _, _, payload in rows:
            event = _from_agent_row(payload, by_instance)
            if event is not None and (kinds is None or event.kind in kinds):
                out.append(event)
        out.sort(key=lambda e: (e.time_unix_s, e.source, e.kind))
        next_seq = job_events[-1].seq if job_events else at.job_seq
        if rows:
            last = max(received for _, received, _ in rows)
            same = {event_id for event_id, received, _ in rows if received == last}
            ids = frozenset(same | (at.agent_ids if last == at.agent_received_unix_s else set()))
            return out, Cursor(next_seq, last, ids)
        return out, Cursor(next_seq, at.agent_received_unix_s, at.agent_ids)

    def _agent_rows(
        self,
        job_id: str | None,
        instance_ids: set[str],
        at: Cursor,
        kinds: Collection[str] | None = None,
        limit: int | None = None,
    ) -> list[tuple[str, float, str]]:
        """(event id, received time, payload) of the agent rows after ``at``, the first ``limit``
        received when given: only the columns the stream reads."""
        t = agent_events
        query = select(t.c.event_id, t.c.received_unix_s, t.c.payload).where(
            t.c.received_unix_s >= at.agent_received_unix_s
        )
        if at.agent_ids:  # read already: in the query, so that a limit counts only the others
            query = query.where(t.c.event_id.not_in(sorted(at.agent_ids)))
        if job_id is not None:
            # An agent that was not told its job still names its instance, which an attempt owns.
            query = query.where((t.c.job_id == job_id) | t.c.instance_id.in_(sorted(instance_ids)))
        if kinds is not None:
            query = query.where(t.c.kind.in_(stored_kinds(kinds)))
        if limit is not None:
            query = query.order_by(t.c.received_unix_s, t.c.event_id).limit(limit)
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [
            (str(event_id), float(received), str(payload)) for event_id, received, payload in rows
        ]


def _first_stored(
    job_events: list[JobEvent], rows: list[tuple[str, float, str]], limit: int
) -> tuple[list[JobEvent], list[tuple[str, float, str]]]:
    """The first ``limit`` of the job events (by seq) and agent rows (by received time) taken
    together, in the order the store wrote them (a job event's time and an agent row's received
    time are both the store's clock): a prefix of each, so that each source's cursor can
    follow its last."""
    i = j = 0
    while i + j < limit and (i < len(job_events) or j < len(rows)):
        if j == len(rows) or (i < len(job_events) and job_events[i].time_unix_s <= rows[j][1]):
            i += 1
        else:
            j += 1
    return job_events[:i], rows[:j]


def stored_kinds(kinds: Collection[str]) -> list[str]:
    """The values of ``agent_events.kind`` whose rows may be events of ``kinds``.

    A row's ``kind`` column is its event's kind (:mod:`spothop.controlplane.store`
    writes both from one event), which is the kind the stream gives it — except a row of an
    event that the writer could not read as a kind it knows (:class:`UnknownEvent`, kind
    ``""``), whose own kind is in its payload: those rows are read, and judged by it."""
    return sorted({*kinds, UnknownEvent.kind})


def _from_job_event(
    time_unix_s: float,
    kind: str,
    job_id: str,
    data: Mapping[str, Any],
    attempts: Mapping[str, AttemptRecord],
) -> StreamEvent:
    attempt = attempts.get(str(data.get("attempt_id", "")))
    return StreamEvent(
        time_unix_s=time_unix_s,
        source=SOURCE_CONTROLLER,
        kind=kind,
        job_id=job_id,
        instance_id=(attempt.instance_id if attempt else None) or data.get("instance_id"),
        provider=attempt.provider if attempt else data.get("provider"),
        zone=attempt.zone if attempt else data.get("zone"),
        instance_type=attempt.instance_type if attempt else data.get("instance_type"),
        cause=data.get("cause") or data.get("reason") or data.get("end_reason"),
        lead_time_s=_number(data.get("lead_time_s")),
        data=dict(data),
    )


def _from_agent_row(payload: str, by_instance: Mapping[str, AttemptRecord]) -> StreamEvent | None:
    try:
        event: AgentEvent = event_from_dict(json.loads(payload))
    except (EventFormatError, ValueError):
        return None  # a row this code cannot read is left out of the stream, not guessed at
    data = event.to_dict()
    attempt = by_instance.get(event.instance_id)
    released = data.get(
        "leases_released", data.get("count") if event.kind == "leases_released" else None
    )
    return StreamEvent(
        time_unix_s=event.time_unix_s,
        source=SOURCE_AGENT,
        kind=str(data.get("kind", event.kind)),
        job_id=event.job_id or (attempt.job_id if attempt else ""),
        instance_id=event.instance_id,
        provider=event.provider or (attempt.provider if attempt else None),
        zone=event.zone or (attempt.zone if attempt else None),
        instance_type=event.instance_type or (attempt.instance_type if attempt else None),
        cause=data.get("cause") or None,
        lead_time_s=_number(data.get("lead_time_s")),
        saved=data.get("saved") or data.get("outcome") or None,
        save_s=_save_s(event.kind, data),
        recomputed_shards=released if isinstance(released, int) else None,
        data=data,
    )


def _save_s(kind: str, data: Mapping[str, Any]) -> float | None:
    """How long the save took: the interruption's timed step, or a ``saved`` event's duration."""
    steps = data.get("steps_s") or {}
    if "save" in steps:
        return _number(steps["save"])
    return _number(data.get("duration_s")) if kind == "saved" else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Mtbf:
    """Mean time between interruptions of one provider's instance type."""

    provider: str
    instance_type: str
    running_s: float
    interruptions: int
    attempts: int

    @property
    def mtbf_s(self) -> float | None:
        return self.running_s / self.interruptions if self.interruptions else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mtbf_s": self.mtbf_s}


def mtbf(attempts: Iterable[AttemptRecord], records: Iterable[LedgerRecord] = ()) -> list[Mtbf]:
    """Per (provider, instance type), sorted: running seconds over preemptions (module contract, 4)."""
    usage = {r.attempt_id: r.usage_s for r in records}
    running: dict[tuple[str, str], float] = defaultdict(float)
    taken: dict[tuple[str, str], int] = defaultdict(int)
    count: dict[tuple[str, str], int] = defaultdict(int)
    for a in attempts:
        key = (a.provider, a.instance_type)
        count[key] += 1
        if a.attempt_id in usage:
            running[key] += usage[a.attempt_id]
        elif a.running_unix_s is not None and a.ended_unix_s is not None:
            running[key] += max(0.0, a.ended_unix_s - a.running_unix_s)
        if a.interrupted:
            taken[key] += 1
    return [Mtbf(p, t, running[(p, t)], taken[(p, t)], count[(p, t)]) for p, t in sorted(count)]
