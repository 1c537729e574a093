"""A bounded on-disk spool of events waiting for the control plane.

``spool.jsonl`` in the agent's state folder, one event (its ``to_dict()``)
a line, oldest first. Contracts:

- :meth:`EventSpool.add` keeps an event once per ``event_id`` (adding it again
  changes nothing), and persists before it returns, so events survive an
  agent restart as well as an outage.
- The spool holds at most ``max_events`` events and ``max_bytes`` bytes of
  lines; past either, the oldest are dropped, each drop counted in
  :attr:`EventSpool.dropped` and logged as a warning with the running count
  (the newest events — the interruption itself — matter most).
- :meth:`EventSpool.remove` forgets the events the control plane accepted.
- The file is rewritten atomically (:func:`spothop.paths.atomic_write_text`),
  so a crash leaves the old spool or the new, never half; a line that does
  not parse is skipped when the spool is loaded.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spothop.paths import atomic_write_text

log = logging.getLogger(__name__)

SPOOL_FILE = "spool.jsonl"
SPOOL_MAX_EVENTS = 10_000  # hours of heartbeat-free events; a preemption writes about ten
SPOOL_MAX_BYTES = 16 * 1024 * 1024  # a few MB of JSON: nothing on an instance's disk


class EventSpool:
    """Events not yet accepted by the control plane, in order, bounded by count and bytes."""

    def __init__(
        self,
        directory: Path,
        *,
        max_events: int = SPOOL_MAX_EVENTS,
        max_bytes: int = SPOOL_MAX_BYTES,
    ) -> None:
        self.path = directory / SPOOL_FILE
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.dropped = 0
        self._lock = threading.Lock()
        self._lines: OrderedDict[str, str] = OrderedDict()  # event_id → its JSON line
        self._bytes = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._load()

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("event_id"), str):
                self._put(event["event_id"], line)
        self._trim()

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, event: dict[str, Any]) -> None:
        """Keep ``event`` (a ``to_dict()``) until :meth:`remove`; once per id; persisted on return."""
        with self._lock:
            event_id = str(event["event_id"])
            if event_id in self._lines:
                return
            self._put(event_id, json.dumps(event, default=str))
            self._trim()
            self._save()

    def pending(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The oldest ``limit`` events (all when None), as dictionaries."""
        with self._lock:
            lines = list(self._lines.values())[:limit]
        return [json.loads(line) for line in lines]

    def remove(self, event_ids: Iterable[str]) -> None:
        with self._lock:
            changed = False
            for event_id in event_ids:
                line = self._lines.pop(event_id, None)
                if line is not None:
                    self._bytes -= len(line) + 1
                    changed = True
            if changed:
                self._save()

    def _put(self, event_id: str, line: str) -> None:
        self._lines[event_id] = line
        self._bytes += len(line) + 1

    def _trim(self) -> None:
        dropped = 0
        while self._lines and (len(self._lines) > self.max_events or self._bytes > self.max_bytes):
            _, line = self._lines.popitem(last=False)
            self._bytes -= len(line) + 1
            dropped += 1
        if dropped:
            self.dropped += dropped
            log.warning(
                "event spool full (%d events, %d bytes at most): dropped the %d oldest, %d in all",
                self.max_events,
                self.max_bytes,
                dropped,
                self.dropped,
            )

    def _save(self) -> None:
        text = "".join(line + "\n" for line in self._lines.values())
        try:
            atomic_write_text(self.path, text)
        except (
            OSError
        ) as exc:  # a full disk: the events are still in memory, and sent if the link returns
            log.error("could not write the event spool %s: %s", self.path, exc)
