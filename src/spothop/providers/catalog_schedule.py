"""The daily live catalog refresh a long-running process (the controller) runs for its real clouds.

:class:`DailyRefresh` holds the providers to refresh and a state file; each
:meth:`~DailyRefresh.poll` (the controller calls it once a pass) refreshes,
with :func:`~spothop.providers.catalog_refresh.refresh_catalog`, every
provider whose last attempt is at least ``interval_s`` (a day) old, in a
background thread so that a slow price API never delays a pass.

Contracts:

- The time of each provider's last attempt is persisted in the state file
  (JSON, written atomically after every attempt), so a restarted controller
  does not refresh again at once; a provider never attempted is due now.
- A failure (any exception: the API down, no credentials, an empty answer)
  is logged and recorded (``ok`` false, the error text) with its time: it is
  retried when the next day's refresh is due, and it never ends the caller.
- An unreadable state file is logged and treated as empty (everything due),
  then rewritten.
- ``clock`` (unix seconds) is injectable: tests move a fake clock a day on.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spothop.providers.base import Provider
from spothop.providers.catalog_refresh import refresh_catalog

log = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 24 * 3600.0
STATE_FILE = "catalog_refresh.json"


@dataclass(frozen=True)
class Attempt:
    """One provider's last refresh attempt: when (unix s), whether it worked, what it changed."""

    at_unix_s: float
    ok: bool
    changes: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_unix_s": self.at_unix_s,
            "ok": self.ok,
            "changes": self.changes,
            "error": self.error,
        }


class DailyRefresh:
    """Refresh each of ``providers``' stored catalogs once per ``interval_s`` (module docstring)."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        state_path: Path,
        *,
        clock: Callable[[], float] = time.time,
        interval_s: float = REFRESH_INTERVAL_S,
        refresh: Callable[[Provider], Any] = refresh_catalog,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be over 0 seconds, got {interval_s}")
        self.providers = dict(providers)
        self.state_path = state_path
        self.clock = clock
        self.interval_s = interval_s
        self.refresh = refresh
        self.attempts: dict[str, Attempt] = self._load()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- the schedule ------------------------------------------------------------

    def due(self) -> list[str]:
        """The providers whose last attempt is ``interval_s`` old or more (or that never had one)."""
        now = self.clock()
        return [
            name
            for name in self.providers
            if (last := self.attempts.get(name)) is None or now - last.at_unix_s >= self.interval_s
        ]

    def run_due(self) -> dict[str, Attempt]:
        """Refresh every due provider now, in this thread; what each attempt gave. Never raises."""
        with self._lock:
            done: dict[str, Attempt] = {}
            for name in self.due():
                at = self.clock()
                try:
                    result = self.refresh(self.providers[name])
                except Exception as exc:  # the API may be back tomorrow: never fatal
                    error = f"{type(exc).__name__}: {exc}"
                    log.warning("catalog refresh of %s failed (retried in a day): %s", name, error)
                    attempt = Attempt(at, ok=False, error=error)
                else:
                    changes = len(getattr(result, "changes", ()))
                    log.info("catalog refresh of %s: %d changes", name, changes)
                    attempt = Attempt(at, ok=True, changes=changes)
                self.attempts[name] = done[name] = attempt
                self._save()
            return done

    def poll(self) -> bool:
        """Start :meth:`run_due` in a background thread if something is due and none runs; started?"""
        if not self.providers or (self._thread is not None and self._thread.is_alive()):
            return False
        if not self.due():
            return False
        self._thread = threading.Thread(target=self.run_due, name="catalog-refresh", daemon=True)
        self._thread.start()
        return True

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for a background refresh, if one runs (tests; a clean stop)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- the state file --------------------------------------------------------

    def _load(self) -> dict[str, Attempt]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            return {
                str(name): Attempt(
                    float(a["at_unix_s"]),
                    bool(a["ok"]),
                    int(a.get("changes", 0)),
                    a.get("error"),
                )
                for name, a in data["providers"].items()
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "catalog refresh state %s unreadable (%s); every provider is due",
                self.state_path,
                exc,
            )
            return {}

    def _save(self) -> None:
        data = {"providers": {name: a.to_dict() for name, a in sorted(self.attempts.items())}}
        try:
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix=".catalog_refresh.")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=1)
            os.replace(tmp, self.state_path)
        except OSError as exc:  # a full disk must not stop the controller either
            log.warning("could not save catalog refresh state %s: %s", self.state_path, exc)
