"""The agents' side of a pass: their events since the cursor, and the facts folded from them.

- :class:`EventCursor` reads the agents' events stored since the persisted
  cursor (``agent_events``, typed by
  :func:`spothop.wire.events.event_from_dict`), oldest first.
- :func:`replayed_events`: every stored event of a taken-over job's live
  instances again (of the kinds ``fold`` reads), for a replica.
- :func:`agent_facts` folds every stored event of an instance into its
  :class:`AgentFacts` (notice, blindness, exit code, its latest heartbeat); :func:`stop_requests`
  says when a stop was first asked of each instance.

The event cursor: agent events have no global sequence, so the cursor is a
time (``received_unix_s``) with the ids seen within :data:`CURSOR_OVERLAP_S`
before it (each with its received time: the window's, not every id ever read); a pass reads from ``time − overlap`` and skips those ids, so an
event committed late by a slow writer is still read once. The cursor moves
only after the pass's actions are carried out (:meth:`EventCursor.commit`):
a controller killed mid-pass reads the same events again, and none is lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from spothop.jobs.controller.snapshot import CONTROL_PLANE_PROTOCOL, AgentFacts
from spothop.jobs.store import JobStore
from spothop.state.agent_tables import agent_events
from spothop.wire.events import AgentEvent, event_from_dict

log = logging.getLogger(__name__)

CURSOR_NAME = "agent_events"
CURSOR_OVERLAP_S = 30.0  # a writer's transaction commits well within this of its received time
MAX_EVENTS_PER_PASS = 5000
# What fold reads (fold.py): the events a taken-over job's instances are read again for.
FOLD_EVENT_KINDS = (
    "self_check",
    "notice_blind",
    "worker_started",
    "advance_notice",
    "final_notice",
    "interruption",
    "exited",
)


class EventCursor:
    """Reads agent events after the persisted cursor; :meth:`commit` moves it (see the module docstring)."""

    def __init__(self, store: JobStore, name: str = CURSOR_NAME, start_unix_s: float = 0.0) -> None:
        self.store = store
        self.name = name
        self.start_unix_s = start_unix_s  # where a cursor never stored starts
        self._pending: tuple[float, dict[str, float]] | None = None

    def _load(self) -> tuple[float, dict[str, float]]:
        """The cursor's time and the ids read within the overlap before it, each with its
        received time (a cursor stored by an older spothop lists ids only: taken as at its
        time, so they leave the window an overlap later)."""
        raw = self.store.cursor(self.name)
        if not raw:
            return self.start_unix_s, {}
        try:
            data = json.loads(raw)
            at, ids = float(data["t"]), data.get("ids", ())
            if isinstance(ids, dict):
                return at, {str(i): float(r) for i, r in ids.items()}
            return at, dict.fromkeys(map(str, ids), at)
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("the agent-event cursor %r does not parse; reading from the start", raw)
            return 0.0, {}

    def read(self) -> list[AgentEvent]:
        since, seen = self._load()
        t = agent_events
        query = (
            select(t.c.event_id, t.c.received_unix_s, t.c.payload)
            .where(t.c.received_unix_s >= since - CURSOR_OVERLAP_S)
            .order_by(t.c.received_unix_s, t.c.event_id)
            .limit(MAX_EVENTS_PER_PASS + len(seen))
        )
        with self.store.engine.connect() as conn:
            rows = conn.execute(query).all()
        events: list[AgentEvent] = []
        window = dict(seen)
        newest = since
        for event_id, received, payload in rows:
            if event_id in seen:
                continue
            try:
                events.append(event_from_dict(json.loads(payload)))
            except Exception as exc:  # a bad row is skipped, once, and said so
                log.warning("agent event %s does not parse: %s", event_id, exc)
            window[event_id] = received
            newest = max(newest, received)
            if len(events) >= MAX_EVENTS_PER_PASS:
                break
        # Each id by its own received time: one older than the overlap can no longer be read
        # again (the next pass reads from newest − overlap), so it leaves the cursor.
        keep = {i: r for i, r in window.items() if r >= newest - CURSOR_OVERLAP_S}
        self._pending = (newest, keep)
        return events

    def commit(self) -> None:
        """Move the cursor past what the last :meth:`read` returned."""
        if self._pending is None:
            return
        newest, ids = self._pending
        self.store.set_cursor(
            self.name, json.dumps({"t": newest, "ids": dict(sorted(ids.items()))})
        )
        self._pending = None


def replayed_events(store: JobStore, instance_ids: Sequence[str]) -> list[AgentEvent]:
    """Every stored event of ``instance_ids`` that fold reads, oldest first (a taken-over job's)."""
    if not instance_ids:
        return []
    t = agent_events
    query = (
        select(t.c.event_id, t.c.payload)
        .where(t.c.instance_id.in_(list(instance_ids)), t.c.kind.in_(FOLD_EVENT_KINDS))
        .order_by(t.c.received_unix_s, t.c.event_id)
    )
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    out: list[AgentEvent] = []
    for event_id, payload in rows:
        try:
            out.append(event_from_dict(json.loads(payload)))
        except Exception as exc:
            log.warning("agent event %s does not parse: %s", event_id, exc)
    return out


def agent_facts(store: JobStore, instance_ids: Sequence[str]) -> dict[str, AgentFacts]:
    """Fold every stored event of each instance into its :class:`AgentFacts`.

    Read from all of the instance's events each pass (indexed by instance id),
    so that nothing about a live attempt depends on the cursor: a restarted
    controller sees the same facts.
    """
    if not instance_ids:
        return {}
    t = agent_events
    kinds = ("advance_notice", "final_notice", "notice_blind", "worker_exited", "exited")
    query = (
        select(t.c.instance_id, t.c.kind, t.c.payload)
        .where(t.c.instance_id.in_(list(instance_ids)), t.c.kind.in_(kinds))
        .order_by(t.c.time_unix_s, t.c.event_id)
    )
    with store.engine.connect() as conn:
        rows = conn.execute(query).all()
    facts: dict[str, dict[str, Any]] = {}
    for instance_id, kind, payload in rows:
        try:
            data = json.loads(payload)
        except ValueError:
            continue
        f = facts.setdefault(instance_id, {})
        if kind in ("advance_notice", "final_notice"):
            if f.get("notice_final") and kind == "advance_notice":
                continue
            f["noticed_at"] = f.get("noticed_at") or data.get("time_unix_s")
            if kind == "final_notice" and not f.get("notice_final"):
                f["noticed_at"] = data.get("time_unix_s")
                f["notice_final"] = True
                f["by_controller"] = data.get("protocol") == CONTROL_PLANE_PROTOCOL
            f["notice_deadline_s"] = data.get("deadline_unix_s")
        elif kind == "notice_blind":
            f["notice_blind"] = True
        elif kind == "worker_exited":
            f["worker_code"] = data.get("code")
            f["worker_phase"] = data.get("phase") or ""
        elif kind == "exited":
            f["agent_code"] = data.get("code")
    _add_beats(facts, _beats(store, instance_ids))
    out: dict[str, AgentFacts] = {}
    for instance_id, f in facts.items():
        agent_code, worker_code = f.get("agent_code"), f.get("worker_code")
        if agent_code in (0, 75):
            code = agent_code
        else:
            code = worker_code if worker_code is not None else agent_code
        out[instance_id] = AgentFacts(
            noticed_at=f.get("noticed_at"),
            notice_final=bool(f.get("notice_final")),
            notice_deadline_s=f.get("notice_deadline_s"),
            notice_blind=bool(f.get("notice_blind")),
            exit_code=None if code is None else int(code),
            worker_phase=str(f.get("worker_phase") or ""),
            notice_by_controller=bool(f.get("by_controller")),
            beat_at=f.get("beat_at"),
        )
    return out


def _add_beats(facts: dict[str, dict[str, Any]], beats: dict[str, float]) -> None:
    for instance_id, beat_at in beats.items():
        facts.setdefault(instance_id, {})["beat_at"] = beat_at


def _beats(store: JobStore, instance_ids: Sequence[str]) -> dict[str, float]:
    """Each instance's registration or latest heartbeat (``agent_heartbeats``, the agent's time)."""
    from spothop.state.agent_tables import agent_heartbeats as t

    query = select(t.c.instance_id, t.c.time_unix_s).where(t.c.instance_id.in_(list(instance_ids)))
    with store.engine.connect() as conn:
        return {str(i): float(at) for i, at in conn.execute(query)}


def stop_requests(store: JobStore, instance_ids: Sequence[str]) -> dict[str, float]:
    """When a stop was first asked of each instance (``agent_requests``, kind ``stop``)."""
    from spothop.state.agent_tables import agent_requests as t

    if not instance_ids:
        return {}
    query = (
        select(t.c.instance_id, t.c.created_unix_s)
        .where(t.c.instance_id.in_(list(instance_ids)), t.c.kind == "stop")
        .order_by(t.c.created_unix_s)
    )
    out: dict[str, float] = {}
    with store.engine.connect() as conn:
        for instance_id, created in conn.execute(query):
            out.setdefault(instance_id, float(created))
    return out
