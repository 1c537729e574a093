"""The instance's own record of what happened: an append-only JSONL event log and a status file.

``events.jsonl`` in the state folder holds one event a line, each the
``to_dict()`` of a typed model of :mod:`spothop.wire.events` (``kind``,
``event_id``, ``schema_version``, the instance's identity, ``time_unix_s`` and
the kind's own fields) — the same dictionaries the control plane stores. It is
the instance's local log, kept whatever the control plane does; with
``--json`` every event is also printed to stdout as it happens.

``status.json`` is the agent's current state in one object (rewritten on
change): ``instance_id``, ``protocol``, ``notice_blind``, ``blind_reasons``,
``state``. The control plane learns the same through ``register`` and the
heartbeats; the file is for whoever is on the instance.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.wire.errors import EventFormatError
from spothop.wire.events import AgentEvent, event_from_dict
from spothop.worker.channel import read_json, write_json

log = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
STATUS_FILE = "status.json"


class EventLog:
    """Appends events to ``events.jsonl`` (one ``write`` per line, so lines never interleave)."""

    def __init__(self, state_dir: Path, *, echo_json: bool = False) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / EVENTS_FILE
        self.status_path = state_dir / STATUS_FILE
        self.echo_json = echo_json
        self._lock = threading.Lock()
        self._status: dict[str, Any] = {}

    def write(self, event: AgentEvent) -> AgentEvent:
        line = json.dumps(event.to_dict(), default=str) + "\n"
        with self._lock:
            try:
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(line)
            except OSError as exc:  # a full disk must not stop the emergency protocol
                log.error("could not write event %s: %s", event.kind, exc)
            if self.echo_json:
                sys.stdout.write(line)
                sys.stdout.flush()
        return event

    def set_status(self, **fields: Any) -> None:
        with self._lock:
            self._status.update(fields)
            try:
                write_json(self.status_path, dict(self._status))
            except OSError as exc:
                log.error("could not write status: %s", exc)


def read_events(state_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Every event in the state folder as a dictionary (only those of ``kind`` when given).

    A torn last line is skipped.
    """
    try:
        lines = (state_dir / EVENTS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and (kind is None or record.get("kind") == kind):
            out.append(record)
    return out


def read_agent_events(state_dir: Path) -> list[AgentEvent]:
    """Every event as its model; unknown kinds and newer versions as ``UnknownEvent``, malformed ones skipped."""
    out = []
    for record in read_events(state_dir):
        try:
            out.append(event_from_dict(record))
        except EventFormatError as exc:
            log.warning("skipping a malformed event in %s: %s", state_dir / EVENTS_FILE, exc)
    return out


@dataclass(frozen=True)
class AgentStatus:
    """An agent's status file, as data."""

    instance_id: str
    protocol: str
    notice_blind: bool
    blind_reasons: tuple[str, ...]
    state: str


def read_status(state_dir: Path) -> AgentStatus | None:
    """The agent's status, or None if it never wrote one. ``notice_blind`` is what the scheduler needs."""
    payload = read_json(state_dir / STATUS_FILE)
    if payload is None:
        return None
    return AgentStatus(
        instance_id=str(payload.get("instance_id", "")),
        protocol=str(payload.get("protocol", "")),
        notice_blind=bool(payload.get("notice_blind", False)),
        blind_reasons=tuple(str(r) for r in payload.get("blind_reasons", ())),
        state=str(payload.get("state", "")),
    )
