"""The agent's record of what happened: an append-only JSONL event log and a status file.

``events.jsonl`` in the state folder holds one JSON object a line, each with
``time_unix_s``, ``event`` and the event's fields. The controller (and the
tests) read it; with ``--json`` every event is also printed to stdout as it
happens. Events the agent writes:

``self_check``, ``notice_blind`` (with ``reasons``), ``worker_started``,
``worker_exited`` (``code``, ``restarts``), ``worker_log`` (never: logs go to
``worker.log``), ``advance_notice``, ``final_notice``, ``watcher_restarted``,
``leases_released``, ``interruption`` (the full record), ``agent_exit``.

``status.json`` is the agent's current state in one object (rewritten on
change): ``instance_id``, ``protocol``, ``notice_blind``, ``blind_reasons``,
``state``. :func:`read_status` is how the scheduler learns that an instance
is notice-blind.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.agent.control import read_json, write_json

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

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time_unix_s": time.time(), "event": event, **fields}
        line = json.dumps(record, default=str) + "\n"
        with self._lock:
            try:
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(line)
            except OSError as exc:  # a full disk must not stop the emergency protocol
                log.error("could not write event %s: %s", event, exc)
            if self.echo_json:
                sys.stdout.write(line)
                sys.stdout.flush()
        return record

    def set_status(self, **fields: Any) -> None:
        with self._lock:
            self._status.update(fields)
            try:
                write_json(self.status_path, dict(self._status))
            except OSError as exc:
                log.error("could not write status: %s", exc)


def read_events(state_dir: Path, event: str | None = None) -> list[dict[str, Any]]:
    """Every event in the state folder (only those named ``event`` when given); a torn last line is skipped."""
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
        if isinstance(record, dict) and (event is None or record.get("event") == event):
            out.append(record)
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
        instance_id=str(payload.get("instance_id", "")), protocol=str(payload.get("protocol", "")),
        notice_blind=bool(payload.get("notice_blind", False)),
        blind_reasons=tuple(str(r) for r in payload.get("blind_reasons", ())),
        state=str(payload.get("state", "")),
    )
