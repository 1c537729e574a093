"""The agent's link to the control plane, in a thread of its own: register, heartbeat, read requests.

Control-plane calls can be slow (a first import of SQLAlchemy on a busy
machine, a server that times out), and the main loop must pick up a notice
within a tick; so the calls that repeat run here, never in the main loop:

1. ``register`` once (retried each round until it works);
2. every ``interval_s``: ``heartbeat`` with the state the agent published;
3. every ``requests_interval_s`` (at most ``interval_s``): ``requests``: each new
   request is handed to the main loop (the ``requests`` deque, and ``wake`` set)
   once, and acknowledged only after the main loop acted on it
   (:meth:`ControlLink.acknowledge`). Requests are read more often than beats
   are sent: a stop the controller asks of a group's other nodes is read within
   a second or so, not up to a heartbeat interval later.

A failing call is logged and tried again next round.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from spothop.wire.contract import ControlPlane, ControlRequest, Heartbeat, Registration

log = logging.getLogger(__name__)


class ControlLink:
    """Registers, beats every ``interval_s`` and reads requests every ``requests_interval_s``
    (default, and at most, ``interval_s``) from ``plane`` until :meth:`close`."""

    def __init__(
        self,
        plane: ControlPlane,
        registration: Callable[[], Registration],
        beat: Callable[[], Heartbeat],
        interval_s: float,
        wake: threading.Event,
        requests_interval_s: float | None = None,
    ) -> None:
        self.plane = plane
        self.registration = registration
        self.beat = beat
        self.interval_s = interval_s
        self.requests_interval_s = min(requests_interval_s or interval_s, interval_s)
        self._next_beat = 0.0  # monotonic time of the next heartbeat: the first round beats
        self.wake = wake
        self.requests: collections.deque[ControlRequest] = collections.deque()
        self.registered = False
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="control-plane", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.requests_interval_s)

    def step(self) -> None:
        """One round: register (until it worked), heartbeat (when one is due), requests."""
        if not self.registered:
            self.registered = self._try(
                "register", lambda: self.plane.register(self.registration())
            )
        now = time.monotonic()
        if now >= self._next_beat:
            self._next_beat = now + self.interval_s
            self._try("heartbeat", lambda: self.plane.heartbeat(self.beat()))
        self._try("requests", self._poll_requests)

    def _poll_requests(self) -> None:
        for request in self.plane.requests():
            if request.request_id not in self._seen:
                self._seen.add(request.request_id)
                self.requests.append(request)
                self.wake.set()

    def acknowledge(self, request: ControlRequest) -> None:
        self._try("acknowledge", lambda: self.plane.acknowledge(request.request_id))

    def _try(self, what: str, call: Callable[[], None]) -> bool:
        try:
            call()
        except Exception as exc:  # logged; tried again next interval
            log.warning("control plane %s failed: %s", what, exc)
            return False
        return True
