"""The interruption event stream: every lifecycle event, from the agents and the controller, in one stream.

The contract:

1. **Two sources, one shape.** The agents' typed events (``agent_events``,
   :mod:`spothop.agent.eventmodel`) and the controller's job events
   (``job_events``) come out as :class:`StreamEvent`: time, source, kind,
   job, instance, provider, zone, instance type, and where the event says
   them, the cause, the lead time, what was saved and how long saving took,
   and what went back to the queue to be recomputed (``leases_released``).
2. **Ordered by time**, then by source and position, so the same rows give
   the same stream; :meth:`EventStream.read` takes a :class:`Cursor` and
   returns the events after it with the next cursor (``--follow``).
3. A controller event about an attempt (its ``attempt_id``) is stamped with
   that attempt's instance, provider, zone and type.
4. :func:`mtbf` is the mean time between interruptions per provider and
   instance type: running seconds (the ledger's, on the provider's clock,
   where it has them; else the attempts' own times) over the number of
   attempts the cloud interrupted (:func:`interrupted`). No interruption: ``mtbf_s`` None (none seen).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select

from spothop.agent.errors import EventFormatError
from spothop.agent.eventmodel import AgentEvent, event_from_dict
from spothop.jobs.lifecycle import EndReason
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.observe.ledger import LedgerRecord
from spothop.state.agent_tables import agent_events

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
        self, job_id: str | None = None, cursor: Cursor | None = None
    ) -> tuple[list[StreamEvent], Cursor]:
        """Events after ``cursor`` (all if None), one job's or every job's, in order; and the next cursor."""
        at = cursor or Cursor()
        attempts = {a.attempt_id: a for a in self.store.attempts(job_id)}
        by_instance = {a.instance_id: a for a in attempts.values() if a.instance_id}
        job_events = self.store.events(job_id, after_seq=at.job_seq)
        out = [
            _from_job_event(e.time_unix_s, e.kind, e.job_id, e.data, attempts) for e in job_events
        ]
        rows = self._agent_rows(job_id, set(by_instance), at)
        for row in rows:
            event = _from_agent_row(row, by_instance)
            if event is not None:
                out.append(event)
        out.sort(key=lambda e: (e.time_unix_s, e.source, e.kind))
        next_seq = job_events[-1].seq if job_events else at.job_seq
        if rows:
            last = max(r["received_unix_s"] for r in rows)
            same = {r["event_id"] for r in rows if r["received_unix_s"] == last}
            ids = frozenset(same | (at.agent_ids if last == at.agent_received_unix_s else set()))
            return out, Cursor(next_seq, last, ids)
        return out, Cursor(next_seq, at.agent_received_unix_s, at.agent_ids)

    def _agent_rows(
        self, job_id: str | None, instance_ids: set[str], at: Cursor
    ) -> list[dict[str, Any]]:
        query = select(agent_events).where(
            agent_events.c.received_unix_s >= at.agent_received_unix_s
        )
        if job_id is not None:
            # An agent that was not told its job still names its instance, which an attempt owns.
            query = query.where(
                (agent_events.c.job_id == job_id)
                | agent_events.c.instance_id.in_(sorted(instance_ids))
            )
        with self.store.engine.connect() as conn:
            rows = [dict(r._mapping) for r in conn.execute(query)]
        return [r for r in rows if r["event_id"] not in at.agent_ids]


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


def _from_agent_row(
    row: Mapping[str, Any], by_instance: Mapping[str, AttemptRecord]
) -> StreamEvent | None:
    try:
        event: AgentEvent = event_from_dict(json.loads(row["payload"]))
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


def interrupted(attempt: AttemptRecord) -> bool:
    """Whether the cloud took (or gave notice it would take) the attempt's instance.

    A noticed instance may end preempted, or be ended by spothop once its
    replacement runs (make-before-break): an interruption either way.
    """
    return attempt.end_reason is EndReason.PREEMPTED or attempt.noticed_unix_s is not None


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
        if interrupted(a):
            taken[key] += 1
    return [Mtbf(p, t, running[(p, t)], taken[(p, t)], count[(p, t)]) for p, t in sorted(count)]
