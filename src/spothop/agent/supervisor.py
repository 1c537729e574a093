"""Worker supervision: start the job's command, keep its logs, signal its process group, restart it.

Contracts:

- The worker runs in a process group (and session) of its own, so the agent
  decides what it is sent; on Linux it also gets ``PR_SET_PDEATHSIG``
  = SIGKILL, so it cannot outlive an agent that is killed (as the VM would
  take it down with the agent).
- Its stdout and stderr go, line by line, to ``worker.log`` and to the
  ``log_sink`` hook (the control plane's log stream) when one is given; a
  sink that raises is dropped after logging, never the worker's output.
- :meth:`Supervisor.restart_delay_s` is the backoff before the k-th restart:
  ``restart_backoff_s × 2^(k−1)``, capped at :data:`RESTART_BACKOFF_MAX_S`;
  :meth:`Supervisor.can_restart` is false once ``restart_limit`` restarts were used.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

RESTART_BACKOFF_MAX_S = 60.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
REAP_TIMEOUT_S = (
    5.0  # after SIGKILL a process is gone within milliseconds; this bounds a stuck reap
)

LogSink = Callable[[str], None]

_libc: ctypes.CDLL | None = None


def _load_libc() -> None:
    global _libc
    if _libc is None:
        with contextlib.suppress(OSError):
            _libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _libc is not None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Supervisor:
    """One worker command, started, watched, restarted and stopped by the agent."""

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        restart_limit: int = 3,
        restart_backoff_s: float = 1.0,
        log_sink: LogSink | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.restart_limit = restart_limit
        self.restart_backoff_s = restart_backoff_s
        self.log_sink = log_sink
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> int:
        """Start the command (again); returns its pid, which is also its process group id."""
        _load_libc()
        self.process = subprocess.Popen(
            self.command,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        assert self.process.stdout is not None
        self._reader = threading.Thread(
            target=self._pump, args=(self.process.stdout,), daemon=True, name="worker-log"
        )
        self._reader.start()
        return self.process.pid

    def _pump(self, stream: IO[bytes]) -> None:
        with open(self.log_path, "ab") as out:
            for line in iter(stream.readline, b""):
                out.write(line)
                out.flush()
                if self.log_sink is not None:
                    try:
                        self.log_sink(line.decode("utf-8", "replace").rstrip("\n"))
                    except Exception:
                        log.exception("worker log sink failed; dropping it")
                        self.log_sink = None

    def poll(self) -> int | None:
        """The worker's exit code once its main process has ended; None while it runs."""
        return self.process.poll() if self.process else None

    def signal_group(self, sig: int) -> bool:
        """Send ``sig`` to the worker's process group; False if there is none (any more)."""
        if self.process is None:
            return False
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def probe(self) -> str | None:
        """Check the signal path (signal 0 to the group); None when it works, else the reason."""
        if self.process is None:
            return "no worker process"
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return None if self.process.poll() is not None else "worker process group not found"
        except PermissionError as exc:
            return f"cannot signal the worker's process group: {exc}"
        return None

    def kill(self) -> None:
        """SIGKILL the whole group and reap the main process."""
        self.signal_group(signal.SIGKILL)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=REAP_TIMEOUT_S)

    def can_restart(self) -> bool:
        return self.restarts < self.restart_limit

    def restart_delay_s(self) -> float:
        """The backoff before the next restart."""
        return float(min(RESTART_BACKOFF_MAX_S, self.restart_backoff_s * 2**self.restarts))
