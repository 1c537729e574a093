"""The embedded control plane: spothop's store and queue, reached through a store process of the agent's own.

``--control-plane sqlite:///…`` or ``postgresql://…``. The store work (the
:class:`~spothop.controlplane.store.StoreControlPlane`, SQLAlchemy and
the queue under it) runs in a child process,
``python -m spothop.controlplane.host`` (its wire protocol is there),
so the agent process itself imports only the standard library and stays
small while it watches, and a store that hangs or crashes cannot take the
agent down. Contracts, on top of :class:`~spothop.wire.contract.ControlPlane`'s:

- :meth:`EmbeddedControlPlane.start` starts the store process without waiting
  (:func:`~spothop.controlplane.open_control_plane` calls it, so the
  process warms up while the worker starts); the first call starts it
  otherwise. A call waits for it to be ready until ``start_timeout_s`` after
  the process started.
- Each call is one request line; its reply must come within
  ``call_timeout_s`` or the call raises :class:`ControlPlaneError` and the
  store process, which serves calls in order and is therefore stuck, is
  killed. A process that exits (killed, crashed) fails its pending calls with
  :class:`ControlPlaneError` (but a :meth:`record` or :meth:`register` the
  process died under is sent once more, to the process that replaces it: the
  store takes either twice as once, so an event the local log has is not left
  out of the store by a restart) and is restarted at once, after a backoff, at
  most ``max_restarts`` times within :data:`RESTART_WINDOW_S` (each restart
  is counted in :attr:`EmbeddedControlPlane.restarts` and logged); past that
  calls raise :class:`ControlPlaneError` (so the emergency protocol releases
  the leases through the queue directly) until the oldest restart leaves the
  window, when a call starts it again.
- An error the store raised comes back typed: a :class:`ControlPlaneError`
  (the store could not be opened) as one; any other (the store or the queue
  refused) as :class:`StoreRefused`, naming the original type; a log chunk's
  gap as :class:`~spothop.wire.errors.LogOffsetGap`, with the stored end.
- The process is in a session of its own (a signal to the agent's or the
  worker's process group does not reach it), starts with SIGTERM and SIGINT
  blocked and ignores them (a shutdown's SIGTERM to every process of the
  instance, even one sent while it starts, does not stop it); it exits when its stdin closes:
  at :meth:`EmbeddedControlPlane.close`, or when the agent dies, even by
  SIGKILL. :meth:`close` waits :data:`STOP_TIMEOUT_S` for it, then kills it.
- :meth:`prepare` costs nothing while the store process is up (it warmed up at
  start); when it is not, it restarts it and imports the fallback queue in
  this process, in a thread, so that the fallback release is fast.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import IO, Any

from spothop.controlplane.queue_leases import QueueLeases
from spothop.controlplane.store import ensure_agent_schema
from spothop.wire.contract import ControlRequest, Heartbeat, Registration, secrets_from
from spothop.wire.errors import ControlPlaneError, LogOffsetGap, StoreRefused
from spothop.wire.events import AgentEvent
from spothop.wire.group import Rendezvous
from spothop.wire.logs import LogChunk

__all__ = ["EmbeddedControlPlane", "StoreRefused", "ensure_agent_schema"]

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10.0  # one store call; SQLite or a near PostgreSQL answers in milliseconds
START_TIMEOUT_S = 60.0  # importing SQLAlchemy and migrating on a busy machine
STOP_TIMEOUT_S = 5.0
MAX_RESTARTS = (
    10  # within RESTART_WINDOW_S: a store down for longer is retried again later, never for good
)
RESTART_WINDOW_S = 600.0
RESTART_BACKOFF_S = 0.2  # doubled per restart, up to RESTART_BACKOFF_MAX_S
RESTART_BACKOFF_MAX_S = 5.0
HOST_MODULE = "spothop.controlplane.host"
STORE_PROCESS_SIGNALS = {signal.SIGTERM, signal.SIGINT}  # the store process ignores them


def _gap(chunk: Any, end_bytes: int) -> LogOffsetGap:
    """The store's :class:`LogOffsetGap` for ``chunk`` (a chunk's dict), rebuilt on this side."""
    return LogOffsetGap(str(chunk.get("attempt_id")), int(chunk.get("offset_bytes", 0)), end_bytes)


def _process_gone(message: str) -> ControlPlaneError:
    """The error of a call whose store process exited before or during it (marked ``gone``:
    the call can go to the process's successor)."""
    error = ControlPlaneError(message)
    error.gone = True  # type: ignore[attr-defined]
    return error


class _Reply:
    """One pending call's slot: set once, by the reader thread, with the reply or None (the process died)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: dict[str, Any] | None = None


class _StoreProcess:
    """One store process and the thread that reads its replies."""

    def __init__(
        self, argv: list[str], on_exit: weakref.WeakMethod[Callable[[_StoreProcess, int], None]]
    ) -> None:
        # Born with SIGTERM and SIGINT blocked (a child inherits the mask): a shutdown's SIGTERM
        # to every process of the instance, sent while the child's interpreter starts, waits until
        # the host ignores it. Only this thread's mask changes, and only around the fork.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STORE_PROCESS_SIGNALS)
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self.started = time.monotonic()
        self.ready = threading.Event()
        self.exited = False
        self._pending: dict[int, _Reply] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._on_exit = on_exit
        assert self.proc.stdout is not None  # both are PIPE
        threading.Thread(
            target=self._read,
            args=(self.proc.stdout,),
            name="control-plane-store-reader",
            daemon=True,
        ).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                log.warning("the store process wrote a line that is not JSON: %r", line[:200])
                continue
            if message.get("ready"):
                self.ready.set()
                continue
            with self._lock:
                reply = self._pending.pop(message.get("id"), None)
            if reply is not None:
                reply.message = message
                reply.done.set()
        code = self.proc.wait()
        with self._lock:
            self.exited = True
            pending, self._pending = list(self._pending.values()), {}
        for reply in pending:
            reply.done.set()  # message None: the process died with the call in it
        self.ready.set()
        on_exit = self._on_exit()  # None: the plane itself is gone (closed by its finalizer)
        if on_exit is not None:
            on_exit(self, code)

    def call(self, method: str, arg: Any, *, start_timeout_s: float, call_timeout_s: float) -> Any:
        if not self.ready.wait(max(0.0, self.started + start_timeout_s - time.monotonic())):
            raise ControlPlaneError(
                f"the embedded store process (pid {self.pid}) was not ready within "
                f"{start_timeout_s:g} s; is the store reachable?"
            )
        reply = _Reply()
        with self._lock:
            if self.exited:
                raise _process_gone(f"the embedded store process (pid {self.pid}) has exited")
            call_id = next(self._ids)
            self._pending[call_id] = reply
            line = json.dumps({"id": call_id, "method": method, "arg": arg}, default=str)
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except OSError as exc:  # the process is gone; the reader will see it exit
                self._pending.pop(call_id, None)
                raise _process_gone(
                    f"the embedded store process (pid {self.pid}) is gone: {exc}"
                ) from exc
        if not reply.done.wait(call_timeout_s):
            with self._lock:
                self._pending.pop(call_id, None)
            log.warning(
                "the embedded store process (pid %d) did not answer %s within %g s; restarting it",
                self.pid,
                method,
                call_timeout_s,
            )
            self.proc.kill()  # it serves calls in order: every later call would wait behind this one
            raise ControlPlaneError(
                f"the embedded store process did not answer {method} within {call_timeout_s:g} s"
            )
        if reply.message is None:
            raise _process_gone(
                f"the embedded store process (pid {self.pid}) exited during {method}"
            )
        error = reply.message.get("error")
        if error is not None:
            text = f"{error.get('type')}: {error.get('message')}"
            if error.get("type") == "LogOffsetGap" and isinstance(error.get("end_bytes"), int):
                raise _gap(arg, int(error["end_bytes"]))
            raise ControlPlaneError(text) if error.get("control_plane") else StoreRefused(text)
        return reply.message.get("result")

    def stop(self, timeout_s: float) -> None:
        """Close its stdin (it exits on that), wait ``timeout_s``, then kill it."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("the embedded store process (pid %d) did not exit; killing it", self.pid)
            self.proc.kill()
            self.proc.wait()


class EmbeddedControlPlane:
    """spothop's store at ``url`` (default: the default database) for ``instance_id``, through a store process."""

    def __init__(
        self,
        url: str | None,
        instance_id: str,
        *,
        queue: QueueLeases | None = None,
        call_timeout_s: float = CALL_TIMEOUT_S,
        start_timeout_s: float = START_TIMEOUT_S,
        max_restarts: int = MAX_RESTARTS,
    ) -> None:
        self.url = url
        self.instance_id = instance_id
        self.queue = queue
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_restarts = max_restarts
        self.restarts = 0
        self._recent_restarts: collections.deque[float] = (
            collections.deque()
        )  # monotonic times, in the window
        self._current: list[_StoreProcess | None] = [
            None
        ]  # shared with the finalizer, which must not hold self
        self._closed = threading.Event()
        self._lock = threading.Lock()
        # A plane dropped without close() still stops its process (and so does the interpreter's exit).
        self._finalizer = weakref.finalize(self, _stop, self._current, self._closed)

    @property
    def _process(self) -> _StoreProcess | None:
        return self._current[0]

    def __enter__(self) -> EmbeddedControlPlane:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The store process's pid, or None before it started."""
        process = self._process
        return process.pid if process is not None else None

    def _argv(self) -> list[str]:
        argv = [sys.executable, "-m", HOST_MODULE, "--instance-id", self.instance_id]
        if self.url:
            argv += ["--url", self.url]
        if self.queue is not None:
            argv += ["--queue-url", self.queue.queue_url, "--job-id", self.queue.job_id]
        return argv

    def start(self) -> None:
        """Start the store process now, without waiting for it to be ready."""
        self._live()

    def _live(self) -> _StoreProcess:
        """The running store process: started, or restarted when it exited (counted, bounded)."""
        with self._lock:
            if self._closed.is_set():
                raise ControlPlaneError("the embedded control plane is closed")
            process = self._process
            if process is not None and not process.exited:
                return process
            if process is not None:
                now = time.monotonic()
                while self._recent_restarts and self._recent_restarts[0] < now - RESTART_WINDOW_S:
                    self._recent_restarts.popleft()
                if len(self._recent_restarts) >= self.max_restarts:
                    raise ControlPlaneError(
                        f"the embedded store process was restarted {len(self._recent_restarts)} "
                        f"times in {RESTART_WINDOW_S:g} s and exited again; not restarting it "
                        "again yet (see the agent's log for why)"
                    )
                self._recent_restarts.append(now)
                self.restarts += 1
                log.warning(
                    "restarting the embedded store process (restart %d; at most %d in %g s)",
                    self.restarts,
                    self.max_restarts,
                    RESTART_WINDOW_S,
                )
            try:
                process = _StoreProcess(self._argv(), weakref.WeakMethod(self._exited))
            except OSError as exc:
                raise ControlPlaneError(
                    f"the embedded store process cannot be started: {exc}"
                ) from exc
            self._current[0] = process
            return process

    def _exited(self, process: _StoreProcess, code: int) -> None:
        """Called by the reader thread when ``process`` exited: restart it after a backoff, unless closed."""
        if self._closed.is_set():
            return
        log.warning("the embedded store process (pid %d) exited with code %s", process.pid, code)
        delay = min(RESTART_BACKOFF_S * 2**self.restarts, RESTART_BACKOFF_MAX_S)
        if self._closed.wait(delay) or self._process is not process:
            return  # closed meanwhile, or a call restarted it first
        try:
            self._live()
        except ControlPlaneError as exc:
            log.error("%s", exc)

    def _call(self, method: str, arg: Any = None, *, again: bool = False) -> Any:
        """One call; with ``again``, a call the store process died under goes once more to the
        process that replaces it (for calls the store takes twice as once: keyed, or upserts)."""
        try:
            return self._live().call(
                method,
                arg,
                start_timeout_s=self.start_timeout_s,
                call_timeout_s=self.call_timeout_s,
            )
        except ControlPlaneError as exc:
            if not (again and getattr(exc, "gone", False)):
                raise
            log.warning("%s; sending %s to its successor", exc, method)
            return self._call(method, arg)

    # -- the contract ------------------------------------------------------------

    def register(self, registration: Registration) -> None:
        self._call("register", registration.to_dict(), again=True)

    def heartbeat(self, beat: Heartbeat) -> None:
        self._call("heartbeat", beat.to_dict())

    def record(self, event: AgentEvent) -> None:
        self._call("record", event.to_dict(), again=True)  # keyed by event_id: twice is once

    def release_leases(self, worker_id: str) -> int:
        return int(self._call("release_leases", worker_id))

    def requests(self) -> list[ControlRequest]:
        return [ControlRequest.from_dict(r) for r in self._call("requests")]

    def acknowledge(self, request_id: str) -> None:
        self._call("acknowledge", request_id)

    def ship_log(self, chunk: LogChunk) -> None:
        self._call(
            "ship_log", chunk.to_dict(), again=True
        )  # a resent part is skipped: twice is once

    def rendezvous(self) -> Rendezvous | None:
        answer = self._call("rendezvous")
        try:
            return None if answer is None else Rendezvous.from_dict(answer)
        except (KeyError, TypeError, ValueError) as exc:
            raise ControlPlaneError(f"the store's rendezvous is not whole: {exc}") from exc

    def secrets(self) -> dict[str, str]:
        return secrets_from(self._call("secrets"), "the store")

    def prepare(self) -> None:
        process = self._process
        if process is not None and not process.exited and process.ready.is_set():
            return  # warm since start
        try:
            self.start()
        except ControlPlaneError as exc:
            log.warning("the embedded store process is not available (%s)", exc)
        if (
            self.queue is not None
        ):  # the fallback release may be needed: have the queue imported by then
            threading.Thread(
                target=_prepare_quietly,
                args=(self.queue,),
                name="control-plane-prepare",
                daemon=True,
            ).start()

    def flush(self, timeout_s: float) -> int:
        del timeout_s
        return 0  # nothing is ever spooled: every call reaches the store or raises

    def close(self) -> None:
        """Stop the store process (it exits when its stdin closes); calls after this raise ControlPlaneError."""
        with self._lock:
            self._closed.set()
        self._finalizer()  # once: a second close does nothing


def _stop(current: list[_StoreProcess | None], closed: threading.Event) -> None:
    closed.set()  # first, so that the process's exit is not taken for a crash
    process, current[0] = current[0], None
    if process is not None:
        process.stop(STOP_TIMEOUT_S)


def _prepare_quietly(queue: QueueLeases) -> None:
    try:
        queue.prepare()
    except Exception as exc:  # the release itself will report the failure
        log.warning("preparing the fallback queue failed: %s", exc)
