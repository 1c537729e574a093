"""The agent ↔ worker channel: a control folder, ``$SPOTHOP_AGENT_DIR``.

Files, each written atomically (temporary name, then rename), so a reader
sees all of one or none:

====================  ======  ====================================================
file                  writer  meaning
====================  ======  ====================================================
``stop.json``         agent   stop now; ``{"deadline_unix_s", "reason", "notice"}``
``checkpoint.json``   agent   checkpoint durably now; ``{"seq", "reason"}``, seq grows
``saved.json``        worker  the emergency checkpoint is saved (SDK ``saved()``)
``heartbeat.json``    worker  the worker is alive (SDK ``heartbeat()``)
``stop-callback``     worker  the worker registered ``on_stop``: deliver stop by
                              ``stop.json`` alone, no SIGTERM
====================  ======  ====================================================

Why files: no server thread or port in the agent, nothing to bind, works in
any container with a shared folder, survives a worker restart, and the
stdlib-only SDK reads it with one ``stat``. The cost — a worker that polls
the folder sees a stop within its poll period — is paid only in callback
mode; by default stop also arrives as SIGTERM to the worker's process group.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

STOP_FILE = "stop.json"
CHECKPOINT_FILE = "checkpoint.json"
SAVED_FILE = "saved.json"
HEARTBEAT_FILE = "heartbeat.json"
CALLBACK_FILE = "stop-callback"


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically (no fsync: a reader on this machine, not a crash, is the concern)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's JSON object, or None if it is absent or not a JSON object."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


class ControlDir:
    """The agent's side of the control folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._checkpoint_seq = 0

    def reset(self) -> None:
        """Clear what a previous worker left (called before each worker start)."""
        for name in (STOP_FILE, SAVED_FILE, HEARTBEAT_FILE, CALLBACK_FILE):
            (self.path / name).unlink(missing_ok=True)

    def request_stop(self, deadline_unix_s: float, reason: str, notice: dict[str, Any]) -> None:
        write_json(self.path / STOP_FILE, {"deadline_unix_s": deadline_unix_s, "reason": reason, "notice": notice})

    def request_checkpoint(self, reason: str) -> int:
        self._checkpoint_seq += 1
        write_json(self.path / CHECKPOINT_FILE, {"seq": self._checkpoint_seq, "reason": reason})
        return self._checkpoint_seq

    def saved(self) -> dict[str, Any] | None:
        """What the worker said it saved, once it called ``saved()``; None before."""
        return read_json(self.path / SAVED_FILE)

    def worker_heartbeat(self) -> float | None:
        payload = read_json(self.path / HEARTBEAT_FILE)
        value = payload.get("time_unix_s") if payload else None
        return float(value) if isinstance(value, int | float) else None

    def callback_mode(self) -> bool:
        return (self.path / CALLBACK_FILE).exists()
