"""The server's controller replica in a process of its own, supervised by ``spothop server run``.

The API answers 500 agents' beats on an event loop; a controller pass (its
cloud calls, the ledger's books) in a thread of the same process held the GIL
for milliseconds at a time, and every beat waiting meanwhile waited with it.
So the replica's controller runs as a child process
(``python -m spothop.server.controller``) that the server starts once uvicorn
listens (its agents are told the server's URL) and supervises:

- **Settings** go to the child as one JSON document on its stdin (the store
  and queue URLs, which may hold a password, never on a command line).
- **One unit with its server.** The child asks the kernel for SIGKILL when the
  thread that started it dies (``PR_SET_PDEATHSIG``, Linux), so a server
  SIGKILLed, or dead of anything, takes its controller with it, as when the
  controller was its thread: the replica's jobs are taken over by the others
  within one lease. Elsewhere the child checks its parent each second.
- **Stop.** The server's shutdown (SIGTERM) sends the child SIGTERM and waits:
  the controller finishes the launches in flight and releases its job leases.
  The child has its own session, so a terminal's Ctrl-C reaches the server
  only, which then stops the child in order.
- **Restart.** A child that exits while the server runs is logged and started
  again after a third of a lease (what the thread did after a failure).
- **Logs** go to the server's stderr through the same redaction as the server's
  own (:mod:`spothop.server.safety`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

STOP_S = 10.0  # how long a stopping child may take to release its leases before it is killed
CONTROLLER_POOL = 5  # the child's database connections (the API's own pool is db_pool)
PR_SET_PDEATHSIG = 1
MODULE = "spothop.server.controller"  # the child's command: python -m MODULE


@dataclass(frozen=True)
class ControllerSettings:
    """What the child needs: :func:`spothop.jobs.controller.replica.run_replica`'s arguments."""

    store_url: str
    queue_url: str | None
    replica_id: str
    lease_s: float
    providers: tuple[str, ...]
    control_plane_url: str
    parent_pid: int


class ControllerProcess:
    """Start, supervise and stop the child (see the module docstring)."""

    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self._stop = threading.Event()
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, name="controller", daemon=True)
        self.starts = 0

    def start(self) -> ControllerProcess:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = STOP_S) -> None:
        """SIGTERM to the child (it releases its leases), SIGKILL past ``timeout_s``."""
        self._stop.set()
        with self._lock:
            child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        self._thread.join(timeout_s + 5)

    def _supervise(self) -> None:
        """The child's lifetime; this thread is its parent in PR_SET_PDEATHSIG's sense, so it
        outlives the child."""
        while not self._stop.is_set():
            child = self._spawn()
            self.starts += 1
            while child.poll() is None:
                if self._stop.wait(0.2):
                    try:
                        child.wait(STOP_S)
                    except subprocess.TimeoutExpired:
                        log.warning("the controller replica did not stop in %.0f s; killed", STOP_S)
                        child.kill()
                        child.wait()
                    return
            if self._stop.is_set():
                return
            log.error("the controller replica exited with %s; starting it again", child.returncode)
            self._stop.wait(self.settings.lease_s / 3)

    def _spawn(self) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, "-m", MODULE],
            stdin=subprocess.PIPE,
            start_new_session=True,  # a terminal's signals reach the server, which stops the child
        )
        assert child.stdin is not None
        child.stdin.write(json.dumps(asdict(self.settings)).encode())
        child.stdin.close()
        with self._lock:
            self._child = child
        return child


def controller_pids(server_pid: int) -> list[int]:
    """The controller processes the server ``server_pid`` supervises, running (Linux: read from
    ``/proc``; for the bench and the tests)."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue  # gone meanwhile
        if int(ppid) == server_pid and state != "Z" and MODULE.encode() in command:
            found.append(int(entry.name))
    return found


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL for this process when its parent dies (Linux); elsewhere a thread that looks."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:

        def watch() -> None:
            while os.getppid() == parent_pid:
                threading.Event().wait(1.0)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked
        os.kill(os.getpid(), signal.SIGKILL)


def _settings(text: str) -> ControllerSettings:
    data: dict[str, Any] = json.loads(text)
    data["providers"] = tuple(data.get("providers") or ())
    return ControllerSettings(**data)


def main(argv: Sequence[str] | None = None) -> int:
    """The child: the settings from stdin, then the replica until SIGTERM."""
    del argv
    settings = _settings(sys.stdin.read())
    _die_with_parent(settings.parent_pid)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    from spothop.controlplane.dist import distribution_for
    from spothop.controlplane.prune import DailyCodePrune
    from spothop.db import pool_options, shared_engine
    from spothop.jobs.controller.replica import run_replica
    from spothop.observe.ledger import close_books
    from spothop.paths import spothop_home
    from spothop.server.safety import Redactor, install_log_filter, secret_values

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:     %(name)s: %(message)s")
    logging.getLogger("spothop").setLevel(logging.INFO)
    install_log_filter(Redactor(secret_values()))
    # The store's shared engine in this process, sized: two replicas' API pools and controllers
    # stay within PostgreSQL's default 100 connections (docs/server.md, "Connections").
    shared_engine(settings.store_url, **pool_options(settings.store_url, CONTROLLER_POOL))
    run_replica(
        settings.store_url,
        owner=settings.replica_id,
        lease_s=settings.lease_s,
        providers=settings.providers,
        stop_event=stop,
        after_pass=(close_books, DailyCodePrune(spothop_home())),
        queue_url=settings.queue_url,
        control_plane_url=settings.control_plane_url,
        # the server at control_plane_url serves this spothop's wheel (its /v1/dist/…): each
        # instance's boot script installs spothop from there
        distribution=distribution_for(settings.control_plane_url, spothop_home()),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
