"""One simulated VM's processes: its boot script, its agent unit, and ending them all.

:class:`Vm` is what a local instance's host (:mod:`.host`) and any other
runtime that plays a VM on this machine (a rehearsal of a real cloud's API,
booting the user-data that cloud was given) share:

1. :meth:`Vm.boot` runs the boot script in the instance's own root
   (:mod:`.isolation`; unisolated where asked), in a process group of its
   own, its output in the instance's ``console.log``;
2. :meth:`Vm.ended` says how the instance ended by itself, if it did: the
   boot script failing (non-zero) or ending without starting the agent unit
   (the ``systemctl`` shim's pid file names it), or the unit's main process
   exiting;
3. :meth:`Vm.kill` signals every process of the instance, the agent unit's
   main process first (as systemd stops a unit) — also one that left its
   process group or session, when the caller is their subreaper
   (:func:`~.processes.become_subreaper`) — and, after a SIGTERM, SIGKILLs
   what is left after a grace.

"Every process of the instance" is every descendant of the calling process:
one :class:`Vm` per process (the local cloud runs one host per instance).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spothop.providers.base import InstanceState
from spothop.providers.local import isolation
from spothop.providers.local.processes import descendants, kill_group, reap_children

UNIT_PID_FILE = "run/spothop-agent.pid"  # where the systemctl shim writes the unit's pid
CONSOLE = "console.log"


@dataclass(frozen=True)
class Ended:
    """How an instance ended by itself: its state, a one-line reason, an exit code if known."""

    state: InstanceState
    reason: str
    exit_code: int | None


class Vm:
    """The processes of the instance whose folder is ``directory`` (module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.worker: subprocess.Popen[bytes] | None = None  # the boot script
        self.unit_pid: int | None = None  # the agent unit's main process, once started
        self.unit_code: int | None = None  # its exit code, once reaped
        self.root = directory / isolation.ROOT_DIR

    @property
    def console(self) -> Path:
        return self.directory / CONSOLE

    def boot(
        self,
        user_data: str,
        *,
        isolated: bool,
        image: Sequence[Path] = (),
        buckets: Sequence[Path] = (),
    ) -> int:
        """Start ``user_data`` (:mod:`.isolation`), its output the console; the boot script's pid."""
        self.console.touch()
        boot = isolation.prepare(
            self.directory,
            user_data,
            isolated=isolated,
            image=list(image),
            buckets=list(buckets),
            console=self.console,
        )
        self.root = boot.root
        log = open(self.console, "ab")  # noqa: SIM115 - handed to the child, closed with it
        self.worker = subprocess.Popen(
            boot.command,
            cwd=boot.cwd,
            env=boot.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return self.worker.pid

    def ended(self) -> Ended | None:
        """How the instance ended by itself (its boot script failed or ended without starting
        the agent unit: FAILED; its unit exited: TERMINATED), or None while it has not."""
        if self.worker is None or (self.unit_pid is None and self.worker.poll() is None):
            return None
        if self.unit_pid is None:
            code = self.worker.returncode
            self.unit_pid = self._read_unit_pid()
            if code != 0 or self.unit_pid is None:
                lines = isolation.console_text(self.directory).strip().splitlines()
                last = lines[-1] if lines else f"exit code {code}, no output"
                why = "failed" if code != 0 else "ended without starting the agent unit"
                return Ended(InstanceState.FAILED, f"boot script {why}: {last}", code)
        if self.unit_running():
            return None
        code = self.unit_code
        return Ended(InstanceState.TERMINATED, f"bootstrap command exited with code {code}", code)

    def exit_code(self) -> int | None:
        """The unit's exit code, else the boot script's where no unit started (None: unknown)."""
        self.unit_running()
        if self.unit_code is not None:
            return self.unit_code
        if self.unit_pid is None and self.worker is not None:
            return self.worker.returncode
        return None

    def _read_unit_pid(self) -> int | None:
        try:
            return int((self.root / UNIT_PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def unit_running(self) -> bool:
        """Whether the unit's main process runs; reaps it (the caller's, as subreaper) when not."""
        if self.unit_pid is None or self.unit_code is not None:
            return False
        try:
            done, status = os.waitpid(self.unit_pid, os.WNOHANG)
        except ChildProcessError:  # not adopted (no subreaper here): watch it from outside
            try:
                os.kill(self.unit_pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        if done == 0:
            return True
        self.unit_code = os.waitstatus_to_exitcode(status)
        return False

    def kill(self, sig: int, grace_s: float = 0.0) -> None:
        """Signal every process of the instance; after a SIGTERM, SIGKILL what is left after
        ``grace_s`` wall seconds."""
        if self.worker is None:
            return
        self._signal_all(sig)
        if sig != signal.SIGKILL:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and (
                self.worker.poll() is None or descendants(os.getpid())
            ):
                self.unit_running()
                reap_children(keep=self.unit_pid or self.worker.pid)
                time.sleep(0.05)
            self._signal_all(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.worker.wait(timeout=5)
        deadline = time.monotonic() + 5
        while self.unit_running() and time.monotonic() < deadline:
            time.sleep(0.02)
        reap_children(keep=self.worker.pid)

    def _signal_all(self, sig: int) -> None:
        assert self.worker is not None
        # The unit's main process (the agent) first, as systemd stops a unit: a worker that saves
        # and exits on its own SIGTERM must not end before its agent has been told of the stop.
        if self.unit_pid is not None and self.unit_running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.unit_pid, sig)
        own = os.getpgid(0)
        groups = {self.worker.pid}
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                groups.add(os.getpgid(pid))
        groups.discard(own)
        for pgid in groups:
            kill_group(pgid, sig)
        for pid in descendants(os.getpid()):  # a process still in the caller's own group
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(pid) == own:
                    os.kill(pid, sig)
