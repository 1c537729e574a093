"""The watch loop: polls one watcher, backs off on errors, and applies the worst-case rule.

The rule, precisely:

1. A poll that fails (NoticeEndpointError: unreachable, timeout, 5xx, a bad
   answer) is logged and counted; the next poll waits ``poll_interval_s ×
   2^(failures−1)``, capped at :data:`ERROR_BACKOFF_MAX_S`.
2. Once the endpoint has answered at least once, ``endpoint_lost_polls``
   consecutive failed polls (default :data:`ENDPOINT_LOST_POLLS`) are a final
   notice *now* (cause ``endpoint-lost``, lead 0): a metadata endpoint that
   vanishes from a running instance is what a host being torn down looks
   like, and waiting to be sure costs the notice window. An endpoint that never
   answered is not a notice; the self-check has already marked the instance
   notice-blind.
3. A notice whose time is unreadable or in the past is "now" (lead 0); a
   lead longer than the cloud documents is clock skew and is capped
   (:func:`spothop.agent.model.final_notice`).
4. Each notice is emitted once per (kind, cause).

Any other exception from a watcher (a bug) counts as a failed poll too: the
loop never dies of a bad answer. If the thread dies anyway, the agent's
watchdog (:class:`WatcherThread`) starts a new one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Notice, final_notice
from spothop.agent.notices.base import Watcher

log = logging.getLogger(__name__)

ENDPOINT_LOST_POLLS = 5  # consecutive failures, after success, that mean the endpoint is gone
ERROR_BACKOFF_MAX_S = 5.0  # never back off past this: a 30 s notice must still be caught in time

Emit = Callable[[Notice], None]


class WatchLoop:
    """Polls ``watcher`` and emits its notices; :meth:`step` is one poll (tests drive it directly)."""

    def __init__(
        self,
        watcher: Watcher,
        emit: Emit,
        *,
        poll_interval_s: float = 1.0,
        endpoint_lost_polls: int = ENDPOINT_LOST_POLLS,
    ) -> None:
        self.watcher = watcher
        self.emit = emit
        self.poll_interval_s = poll_interval_s
        self.endpoint_lost_polls = endpoint_lost_polls
        self.worked = False
        self.failures = 0
        self.last_error: str | None = None
        self._emitted: set[tuple[str, str]] = set()

    def step(self) -> float:
        """Poll once, emit what is new; return the seconds to wait before the next poll."""
        try:
            notices = self.watcher.poll()
        except NoticeEndpointError as exc:
            return self._failed(str(exc))
        except Exception as exc:  # a watcher bug is a failed poll, never a dead agent
            log.exception("%s watcher failed", self.watcher.protocol)
            return self._failed(f"{type(exc).__name__}: {exc}")
        self.worked, self.failures, self.last_error = True, 0, None
        for notice in notices:
            self._emit_once(notice)
        return 0.0 if self.watcher.long_poll else self.poll_interval_s

    def _failed(self, reason: str) -> float:
        self.failures += 1
        self.last_error = reason
        log.warning(
            "%s notice poll failed (%d in a row): %s", self.watcher.protocol, self.failures, reason
        )
        if self.worked and self.failures >= self.endpoint_lost_polls:
            now = self.watcher.clock()
            self._emit_once(
                final_notice(
                    self.watcher.protocol,
                    "endpoint-lost",
                    seen_at=now,
                    deadline=now,
                    documented_lead_s=self.watcher.documented_lead_s,
                    raw=reason,
                )
            )
        backoff: float = self.poll_interval_s * 2.0 ** (self.failures - 1)
        return min(backoff, max(ERROR_BACKOFF_MAX_S, self.poll_interval_s))

    def _emit_once(self, notice: Notice) -> None:
        key = (notice.kind.value, notice.cause)
        if key in self._emitted:
            return
        self._emitted.add(key)
        log.info("notice: %s %s lead %s s", notice.kind.value, notice.cause, notice.lead_time_s)
        self.emit(notice)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            delay = self.step()
            if delay > 0:
                stop.wait(delay)


class WatcherThread:
    """The watch loop in a daemon thread, with a watchdog: :meth:`ensure_alive` restarts a dead thread.

    The loop's state (what was emitted, the failure count) survives a restart,
    so a notice is still emitted once.
    """

    def __init__(self, loop: WatchLoop) -> None:
        self.loop = loop
        self.stop = threading.Event()
        self.restarts = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.loop.run,
            args=(self.stop,),
            daemon=True,
            name=f"watch-{self.loop.watcher.protocol}",
        )
        self._thread.start()

    def ensure_alive(self) -> bool:
        """Restart the thread if it died; True when it had to."""
        if self.stop.is_set() or (self._thread is not None and self._thread.is_alive()):
            return False
        self.restarts += 1
        log.error(
            "%s watcher thread died; restarting it (restart %d)",
            self.loop.watcher.protocol,
            self.restarts,
        )
        self.start()
        return True

    def close(self) -> None:
        self.stop.set()
