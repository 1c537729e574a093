"""The log shipper: the worker's output file, sent to the control plane in ordered chunks.

:class:`LogShipper` tails the worker's output (``<state-dir>/worker.log``,
:func:`~spothop.wire.logs.worker_log_path`, instance-local) from a thread, and every
:data:`SHIP_INTERVAL_S` ships what the file gained since the last acknowledged
byte, oldest first, in chunks of at most :data:`~spothop.wire.logs.CHUNK_MAX_BYTES`
(:meth:`~spothop.wire.contract.ControlPlane.ship_log`). Contracts:

- The file is the spool: nothing is copied. The acknowledged offset is persisted in
  ``<state-dir>/worker.log.shipped`` after each acknowledged chunk, so a restarted agent
  resumes where its predecessor's acknowledgements stopped (a chunk the store took but
  whose answer was lost is resent, and the store skips what it holds: never twice).
- While the control plane cannot be reached, the shipper waits with exponential
  backoff (:data:`BACKOFF_S` doubled up to :data:`BACKOFF_MAX_S`, with jitter) and
  catches up when it answers again.
- A :class:`~spothop.wire.errors.LogOffsetGap` (the store holds less, or more, than the
  persisted offset says) resynchronises to the store's end at once.
- :meth:`LogShipper.close` stops the thread and ships what is left within a bounded
  time (the agent's exit, after the emergency protocol); what does not make it stays
  in the file, its offset persisted.

Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from pathlib import Path

from spothop.wire.contract import ControlPlane
from spothop.wire.errors import ControlPlaneAuthError, LogOffsetGap
from spothop.wire.logs import CHUNK_MAX_BYTES, LogChunk

log = logging.getLogger(__name__)

SHIP_INTERVAL_S = 1.0  # how often the file is looked at
BACKOFF_S = 1.0  # the first wait after a failed send, doubled per failure
BACKOFF_MAX_S = 30.0
CLOSE_TIMEOUT_S = 3.0  # at the agent's exit: how long the last ship may take
OFFSET_SUFFIX = ".shipped"


class LogShipper:
    """Ships ``path`` (attempt ``attempt_id``'s output) through ``plane``; see the module docstring."""

    def __init__(
        self,
        plane: ControlPlane,
        path: Path,
        *,
        instance_id: str,
        attempt_id: str,
        job_id: str = "",
        node: int = 0,
        interval_s: float = SHIP_INTERVAL_S,
        backoff_s: float = BACKOFF_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        chunk_bytes: int = CHUNK_MAX_BYTES,
    ) -> None:
        self.plane = plane
        self.path = path
        self.offset_path = path.with_name(path.name + OFFSET_SUFFIX)
        self.instance_id, self.attempt_id, self.job_id, self.node = (
            instance_id,
            attempt_id,
            job_id,
            node,
        )
        self.interval_s = interval_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.chunk_bytes = max(1, min(chunk_bytes, CHUNK_MAX_BYTES))
        self.acked_bytes = self._load_offset()
        self.failures = 0  # consecutive failed sends
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one sender at a time: the thread, or close()
        self._thread: threading.Thread | None = None

    # -- the persisted offset ------------------------------------------------------

    def _load_offset(self) -> int:
        """The acknowledged offset a previous run of this attempt persisted (0: none)."""
        try:
            data = json.loads(self.offset_path.read_text())
            if data.get("attempt_id") == self.attempt_id:
                return max(0, int(data["offset_bytes"]))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "%s is unreadable (%s); shipping the log from its start", self.offset_path, exc
            )
        return 0

    def _save_offset(self) -> None:
        tmp = self.offset_path.with_name(self.offset_path.name + ".tmp")
        try:
            tmp.write_text(
                json.dumps({"attempt_id": self.attempt_id, "offset_bytes": self.acked_bytes})
            )
            os.replace(tmp, self.offset_path)
        except OSError as exc:  # a full disk: the store skips what a restart resends
            log.warning("cannot persist the shipped log offset in %s: %s", self.offset_path, exc)

    # -- shipping --------------------------------------------------------------------

    def _read(self) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.acked_bytes)
                return handle.read(self.chunk_bytes)
        except FileNotFoundError:
            return b""

    def ship(self, timeout_s: float | None = None) -> bool:
        """Ship what the file gained, chunk after chunk, until it is all acknowledged (True), a
        send fails (False) or ``timeout_s`` has passed (False)."""
        until = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while until is None or time.monotonic() < until:
                raw = self._read()
                if not raw:
                    return True
                chunk = LogChunk.of(
                    raw,
                    instance_id=self.instance_id,
                    attempt_id=self.attempt_id,
                    offset_bytes=self.acked_bytes,
                    job_id=self.job_id,
                    node=self.node,
                )
                try:
                    self.plane.ship_log(chunk)
                except LogOffsetGap as gap:
                    log.warning("%s; resending from there", gap)
                    self.acked_bytes = gap.end_bytes
                    self._save_offset()
                    continue
                except Exception as exc:  # the control plane is down or refused: retry later
                    self.failures += 1
                    level = (
                        logging.ERROR if isinstance(exc, ControlPlaneAuthError) else logging.INFO
                    )
                    log.log(level, "shipping the worker's log failed (%s); retrying later", exc)
                    return False
                self.failures = 0
                self.acked_bytes += len(raw)
                self._save_offset()
            return False

    def _wait_s(self) -> float:
        if not self.failures:
            return self.interval_s
        backoff = min(self.backoff_max_s, self.backoff_s * 2 ** (self.failures - 1))
        return max(self.interval_s, random.uniform(backoff / 2, backoff))

    def _run(self) -> None:
        while not self._stop.wait(self._wait_s()):
            try:
                self.ship(timeout_s=self.interval_s * 5)
            except Exception:  # never let the thread die: the exit's close() ships the rest
                log.exception("the log shipper failed; retrying")
                self.failures += 1

    def start(self) -> None:
        """Start the shipping thread (a daemon: it never holds the agent's exit)."""
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop the thread and ship what is left, within about ``timeout_s``; True when every
        byte of the file is acknowledged."""
        until = time.monotonic() + timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(0.0, until - time.monotonic()))
        left = until - time.monotonic()
        if left <= 0 or not self._lock.acquire(timeout=left):
            return False
        self._lock.release()
        return self.ship(timeout_s=max(0.0, until - time.monotonic()))
