"""The HTTP control plane: ``spothop server``'s agent API, through :mod:`spothop.wire.client`.

Endpoints (``docs/agent.md`` is the contract the server implements); every
request carries ``Authorization: Bearer TOKEN`` and JSON bodies:

=================================================  ==============================================
``POST /v1/agents/register``                        a :class:`Registration`; 2xx
``POST /v1/agents/{instance_id}/heartbeat``         a :class:`Heartbeat`; 2xx
``POST /v1/agents/{instance_id}/events``            ``{"events": [event, …]}``, at most
                                                    :data:`EVENTS_BATCH` a request; 2xx means every
                                                    one is stored (a known ``event_id`` is skipped)
``POST /v1/agents/{instance_id}/leases/release``    ``{"worker_id"}`` → ``{"released": N}``
``GET  /v1/agents/{instance_id}/requests``          → ``{"requests": [request, …]}`` unacknowledged
``POST /v1/agents/{instance_id}/requests/{id}/ack``  2xx
``POST /v1/agents/{instance_id}/logs``              a :class:`LogChunk` → ``{"end_bytes": N}``;
                                                    409 ``LogOffsetGap`` (with ``end_bytes``) for a
                                                    chunk past the stored end
``GET  /v1/agents/{instance_id}/rendezvous``        → ``{"rendezvous": rendezvous | null}``
``GET  /v1/agents/{instance_id}/secrets``           → ``{"secrets": {NAME: value}}``; 403 for
                                                    another instance's path
=================================================  ==============================================

Failure rules:

- Every call has a timeout (``timeout_s``). A connection error, a timeout, a
  429 or a 5xx is retried up to ``attempts`` times with exponential backoff
  and full jitter (``backoff_s × 2^k``, capped at ``backoff_max_s``), then
  raises :class:`ControlPlaneError`. Once the server has failed, calls within
  the next backoff window fail at once (no connection is tried), so a dead
  server costs the emergency protocol nothing; the window doubles with each
  failed try up to :data:`OUTAGE_BACKOFF_MAX_S`, with jitter.
- 401 and 403 raise :class:`ControlPlaneAuthError` at once: a wrong token is
  not an outage. Another 4xx raises :class:`ControlPlaneError` naming it.
- :meth:`HttpControlPlane.record` never raises: the event goes to the
  :class:`~spothop.controlplane.spool.EventSpool` first, then the spool
  is sent when the server is not in its backoff window; :meth:`HttpControlPlane.flush`
  (the agent's exit: its last chance) tries at once, window or not, within its
  timeout. Events are sent oldest
  first and removed only once the server took them, so an outage loses
  nothing (up to the spool's bounds) and a resend is deduplicated by the server.
- The token is never logged; ``repr`` hides it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from spothop.controlplane.spool import EventSpool
from spothop.wire.client import (
    HttpStatus,
    JsonClient,
    NotJson,
    OutageWindow,
    Unreachable,
    full_jitter_s,
    retrying,
)
from spothop.wire.contract import (
    EVENTS_BATCH,
    ControlRequest,
    Heartbeat,
    Registration,
    secrets_from,
)
from spothop.wire.errors import ControlPlaneAuthError, ControlPlaneError, LogOffsetGap
from spothop.wire.events import AgentEvent
from spothop.wire.group import Rendezvous
from spothop.wire.logs import LogChunk

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 3.0  # one call; a server on the same network answers in milliseconds
FLUSH_RETRY_S = 0.25  # a flush that failed tries again after this, while its budget lasts
ATTEMPTS = 3
BACKOFF_S = 0.2
BACKOFF_MAX_S = 2.0
OUTAGE_BACKOFF_MAX_S = 30.0  # how long a dead server is left alone at most between tries


class HttpControlPlane:
    """``spothop server`` at ``base_url`` (``http(s)://host[:port][/prefix]``) for instance ``instance_id``."""

    def __init__(
        self,
        base_url: str,
        instance_id: str,
        *,
        token: str | None,
        spool_dir: Path,
        timeout_s: float = HTTP_TIMEOUT_S,
        attempts: int = ATTEMPTS,
        backoff_s: float = BACKOFF_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        spool: EventSpool | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.instance_id = instance_id
        self._token = token
        self.timeout_s = timeout_s
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.spool = spool or EventSpool(spool_dir)
        self._agent_path = f"/v1/agents/{urllib.parse.quote(instance_id, safe='')}"
        self._client = JsonClient(self.base_url, token, timeout_s=timeout_s)
        self._send_lock = threading.Lock()
        self._outage = OutageWindow(backoff_s, OUTAGE_BACKOFF_MAX_S)

    def __repr__(self) -> str:
        return f"HttpControlPlane({self.base_url!r}, {self.instance_id!r}, token={'***' if self._token else None})"

    # -- the contract ------------------------------------------------------------

    def register(self, registration: Registration) -> None:
        self._call("POST", "/v1/agents/register", registration.to_dict())

    def heartbeat(self, beat: Heartbeat) -> None:
        self._call("POST", f"{self._agent_path}/heartbeat", beat.to_dict())
        self.flush(self.timeout_s)  # the link works again: send what waited

    def record(self, event: AgentEvent) -> None:
        """Spool ``event``, then send the spool unless the server is in its backoff window; never raises."""
        self.spool.add(event.to_dict())
        self._drain(self.timeout_s, now=False)

    def flush(self, timeout_s: float) -> int:
        """Send spooled events, oldest first, for up to about ``timeout_s``; how many still wait.

        Tried now, even inside a backoff window, and no call outlasts ``timeout_s``: the agent
        flushes when it has no later (at its exit, its instance about to go), and a server that
        failed a moment ago may well answer now.
        """
        return self._drain(timeout_s, now=True)

    def _drain(self, timeout_s: float, *, now: bool) -> int:
        """The spool sent in batches for up to ``timeout_s``; ``now``: past a backoff window."""
        until = time.monotonic() + timeout_s
        with self._send_lock:
            while len(self.spool) and (left := until - time.monotonic()) > 0:
                if self._in_backoff() and not now:
                    break
                batch = self.spool.pending(EVENTS_BATCH)
                try:
                    self._call(
                        "POST",
                        f"{self._agent_path}/events",
                        {"events": batch},
                        attempts=1,
                        timeout_s=min(self.timeout_s, left),
                        past_backoff=now,
                    )
                except ControlPlaneAuthError as exc:
                    log.error("the control plane refused the agent's events: %s", exc)
                    break
                except ControlPlaneError as exc:
                    log.warning(
                        "control plane unreachable; %d events spooled: %s", len(self.spool), exc
                    )
                    pause = min(FLUSH_RETRY_S, until - time.monotonic())
                    if not now or pause <= 0:
                        break
                    # A flush is the agent's last chance: a server slow to answer one call (a
                    # timeout) or restarting may answer the next, so the budget is spent trying.
                    time.sleep(pause)
                    continue
                self.spool.remove(str(e["event_id"]) for e in batch)
            return len(self.spool)

    def release_leases(self, worker_id: str) -> int:
        answer = self._call("POST", f"{self._agent_path}/leases/release", {"worker_id": worker_id})
        released = answer.get("released") if isinstance(answer, dict) else None
        if not isinstance(released, int) or isinstance(released, bool):
            raise ControlPlaneError(
                f"{self.base_url}: leases/release answered {answer!r}, not {{'released': N}}"
            )
        return released

    def requests(self) -> list[ControlRequest]:
        answer = self._call("GET", f"{self._agent_path}/requests")
        items = answer.get("requests") if isinstance(answer, dict) else None
        if not isinstance(items, list):
            raise ControlPlaneError(
                f"{self.base_url}: requests answered {answer!r}, not {{'requests': [...]}}"
            )
        try:
            return [ControlRequest.from_dict(item) for item in items]
        except (KeyError, TypeError, ValueError) as exc:
            raise ControlPlaneError(
                f"{self.base_url}: a request without request_id/kind: {exc}"
            ) from exc

    def acknowledge(self, request_id: str) -> None:
        self._call(
            "POST", f"{self._agent_path}/requests/{urllib.parse.quote(request_id, safe='')}/ack", {}
        )

    def ship_log(self, chunk: LogChunk) -> None:
        """One try, even inside the outage window (the agent's shipper keeps its own backoff,
        and the bytes wait in the worker's file); :class:`LogOffsetGap` with the stored end for
        a chunk past it."""
        self._call(
            "POST", f"{self._agent_path}/logs", chunk.to_dict(), attempts=1, past_backoff=True
        )

    def rendezvous(self) -> Rendezvous | None:
        answer = self._call("GET", f"{self._agent_path}/rendezvous")
        if not isinstance(answer, dict) or "rendezvous" not in answer:
            raise ControlPlaneError(
                f"{self.base_url}: rendezvous answered {answer!r}, not {{'rendezvous': ...}}"
            )
        if answer["rendezvous"] is None:
            return None
        try:
            return Rendezvous.from_dict(answer["rendezvous"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ControlPlaneError(
                f"{self.base_url}: a rendezvous that is not whole: {exc}"
            ) from exc

    def secrets(self) -> dict[str, str]:
        answer = self._call("GET", f"{self._agent_path}/secrets")
        return secrets_from(
            answer.get("secrets") if isinstance(answer, dict) else None, self.base_url
        )

    def prepare(self) -> None:
        """Nothing to import: urllib is loaded already."""

    def close(self) -> None:
        """Nothing to close: every call opens and closes its own connection."""

    # -- transport -----------------------------------------------------------------

    def _in_backoff(self) -> bool:
        return self._outage.left_s() > 0

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        attempts: int | None = None,
        timeout_s: float | None = None,
        past_backoff: bool = False,
    ) -> Any:
        """One call with retries; the decoded JSON answer (None for an empty body).

        ``timeout_s``: each try's (default ``self.timeout_s``); ``past_backoff``: tried even
        within the backoff window (:meth:`flush`)."""
        if self._in_backoff() and not past_backoff:
            left = self._outage.left_s()
            raise ControlPlaneError(f"{self.base_url} is unreachable (next try in {left:.1f} s)")
        tries = attempts or self.attempts
        try:
            answer = retrying(
                lambda: self._send(method, path, body, timeout_s or self.timeout_s),
                attempts=tries,
                retry=lambda exc: isinstance(exc, _Retryable),
                delay_s=lambda k, _: full_jitter_s(k, self.backoff_s, self.backoff_max_s),
            )
        except _Retryable as exc:
            self._outage.failed()
            raise ControlPlaneError(
                f"{method} {self.base_url}{path} failed {tries} times; last: {exc}"
            ) from None
        self._outage.succeeded()
        return answer

    def _send(self, method: str, path: str, body: dict[str, Any] | None, timeout_s: float) -> Any:
        try:
            return self._client.send(method, path, body=body, timeout_s=timeout_s)
        except HttpStatus as exc:
            detail = exc.body[:300].decode("utf-8", "replace").strip()
            gap = _gap(exc) if exc.code == 409 else None
            if gap is not None:
                raise gap from None
            if exc.auth:
                raise ControlPlaneAuthError(
                    f"{method} {self.base_url}{path}: HTTP {exc.code} {detail!r}: the control plane refused the "
                    "agent's token; pass the instance's token with --token or $SPOTHOP_AGENT_TOKEN"
                ) from exc.__cause__
            if exc.retryable:
                raise _Retryable(f"HTTP {exc.code} {detail!r}") from exc.__cause__
            raise ControlPlaneError(
                f"{method} {self.base_url}{path}: HTTP {exc.code} {detail!r}"
            ) from exc.__cause__
        except Unreachable as exc:
            raise _Retryable(str(exc)) from exc.error
        except NotJson as exc:
            raise ControlPlaneError(
                f"{method} {self.base_url}{path}: an answer that is not JSON: {exc.raw[:200]!r}"
            ) from exc.__cause__


def _gap(exc: HttpStatus) -> LogOffsetGap | None:
    """The server's 409 ``LogOffsetGap`` (its body names the stored end), or None for another 409."""
    try:
        error = json.loads(exc.body)["error"]
        if error["type"] != "LogOffsetGap":
            return None
        return LogOffsetGap(
            str(error["attempt_id"]), int(error["offset_bytes"]), int(error["end_bytes"])
        )
    except (ValueError, KeyError, TypeError):
        return None


class _Retryable(Exception):
    """A failure worth another try: the connection, a timeout, 429 or a 5xx."""
