"""Heartbeats to the control plane, behind one small protocol, :class:`Heartbeats`.

- :class:`SqliteHeartbeats` — embedded mode: one row per instance in a
  SQLite file (stdlib ``sqlite3``, so the agent stays light), upserted.
- :class:`HttpHeartbeats` — server mode: ``POST`` the beat as JSON to a URL,
  with a timeout.

A sink may raise; the agent logs the failure and carries on (a missed beat
is the controller's signal, not the agent's problem).
"""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

HTTP_HEARTBEAT_TIMEOUT_S = 5.0  # a beat that takes longer is late anyway; the next one is due soon
SQLITE_BUSY_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Heartbeat:
    instance_id: str
    worker_id: str
    time_unix_s: float
    state: str  # "running", "restarting", "preempting", "done", "failed"
    worker_pid: int | None
    worker_restarts: int
    worker_heartbeat_unix_s: float | None  # the worker's own last heartbeat (SDK), if any
    notice_blind: bool


class Heartbeats(Protocol):
    def beat(self, heartbeat: Heartbeat) -> None:
        """Record one heartbeat. May raise; the caller logs and continues."""


class SqliteHeartbeats:
    """Latest beat per instance in table ``agent_heartbeats`` of a SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS agent_heartbeats (instance_id TEXT PRIMARY KEY, worker_id TEXT,"
                " time_unix_s REAL, state TEXT, worker_pid INTEGER, worker_restarts INTEGER,"
                " worker_heartbeat_unix_s REAL, notice_blind INTEGER)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=SQLITE_BUSY_TIMEOUT_S)

    def beat(self, heartbeat: Heartbeat) -> None:
        conn = self._connect()
        try:
            with conn:
                conn.execute("INSERT OR REPLACE INTO agent_heartbeats VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (
                    heartbeat.instance_id, heartbeat.worker_id, heartbeat.time_unix_s, heartbeat.state,
                    heartbeat.worker_pid, heartbeat.worker_restarts, heartbeat.worker_heartbeat_unix_s,
                    int(heartbeat.notice_blind)))
        finally:
            conn.close()

    def latest(self, instance_id: str) -> Heartbeat | None:
        conn = self._connect()
        try:
            row = conn.execute("SELECT * FROM agent_heartbeats WHERE instance_id = ?", (instance_id,)).fetchone()
        finally:
            conn.close()
        if row is None:
            return None
        return Heartbeat(row[0], row[1], row[2], row[3], row[4], row[5], row[6], bool(row[7]))


class HttpHeartbeats:
    """POST each beat as JSON to ``url``; an HTTP error or a timeout raises (OSError)."""

    def __init__(self, url: str, timeout_s: float = HTTP_HEARTBEAT_TIMEOUT_S) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def beat(self, heartbeat: Heartbeat) -> None:
        body = json.dumps(asdict(heartbeat)).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            response.read()
