"""A local instance's machine: when its host dies, however it dies, every process on it dies too.

On a real cloud a VM dies whole: its agent, the user's worker, every process
goes with it. A local instance's processes are this machine's, so something
has to end them when the instance's host (:mod:`.host`, the hypervisor) is
SIGKILLed; :func:`main` is that something.

``python -m spothop.providers.local.watchdog INSTANCE_DIR`` is what
:func:`.boot.start_host` starts (in a session of its own). It

1. makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``, Linux);
2. starts the host as its only child, with ``PR_SET_PDEATHSIG`` = SIGKILL
   (the watchdog gone, the host goes too: nothing would power the machine
   off any more) and passes SIGTERM, SIGINT and SIGHUP on to it;
3. waits for the host to end: a terminate, a preemption, its unit exiting,
   or a SIGKILL of the host alone (a test's, a chaos run's);
4. then SIGKILLs every process still below it, parents before children,
   reaping as it goes, until it has no child left, and exits with the
   host's status.

Why this holds for every process of the instance: the host is a subreaper
too, so while it lives every orphan of the instance (the agent unit the
``systemctl`` shim left behind, a worker's double-forked daemon) is
reparented to it, not to this machine's init; when the host dies, the kernel
hands its children, and every later orphan below them, to the nearest living
subreaper above: the watchdog. No process leaves that subtree by starting a
session or a process group of its own (``setsid``, ``setpgid``): those change
what a signal to a group reaches, not who the parent is. A process that forks
while the watchdog kills is itself a child of a process below the watchdog,
so the next pass finds it; the watchdog stops only when ``waitpid`` says it
has no child left, which, as every orphan comes to it, means nothing is left.

Why not the alternatives:

- ``PR_SET_PDEATHSIG`` in each child holds for that child only: the flag is
  cleared in a fork's child, so a worker's own children (a double-forked
  daemon) outlive it; it is also tied to the *thread* that forked.
- One process group, session or ``killpg``: the agent puts the worker in a
  session of its own (:mod:`spothop.agent.supervisor`), and any worker can
  call ``setsid``.
- A PID namespace (its init's death kills every process in it, in the kernel)
  would renumber the instance's processes: the host reads the agent unit's
  pid from the shim's pid file and waits on it as its parent, which a
  namespace's own init would take over; and it needs a user namespace where
  the unisolated mode runs as the host's user.
- A cgroup (``cgroup.kill``) needs a delegated, writable cgroup tree, which a
  container or an unprivileged user rarely has, and a survivor to write it.

Where a subreaper cannot be (not Linux), the watchdog replaces itself with the
host (``exec``): nothing changes from before, and the cloud's next read of the
instance (:mod:`.lost`) ends what is left, as it also does for a watchdog
that is itself killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from spothop.providers.local.processes import become_subreaper, descendants, kill_process

HOST_MODULE = "spothop.providers.local.host"
PR_SET_PDEATHSIG = 1  # linux/prctl.h
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_REAP_PAUSE_S = 0.005  # between passes while SIGKILLed processes finish dying


def host_command(directory: str) -> list[str]:
    return [sys.executable, "-m", HOST_MODULE, directory]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _die_with_watchdog(libc: ctypes.CDLL | None, watchdog: int) -> None:
    """In the host between fork and exec: SIGKILL when the watchdog dies, also if it already did."""
    if libc is not None:
        with contextlib.suppress(AttributeError):
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != watchdog:  # died before the prctl: no signal would come
        os._exit(1)


def power_off() -> None:
    """SIGKILL every process below this one until none is left (module docstring, step 4)."""
    while True:
        for pid in descendants(os.getpid()):  # parents first: an agent never sees its worker end
            kill_process(pid, signal.SIGKILL)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return  # no child left: every orphan below comes here, so nothing is left
            if pid == 0:
                break
        time.sleep(_REAP_PAUSE_S)


def run(directory: str) -> int:
    """Start the host, wait for it, then end whatever it left (module docstring)."""
    if not become_subreaper():
        os.execv(sys.executable, host_command(directory))
    me, libc = os.getpid(), _libc()
    host: subprocess.Popen[bytes] | None = None
    pending: list[int] = []  # a signal before the host exists: passed on once it does

    def forward(signum: int, _frame: FrameType | None) -> None:
        if host is None:
            pending.append(signum)
        else:
            kill_process(host.pid, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    host = subprocess.Popen(
        host_command(directory),
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: _die_with_watchdog(libc, me),  # one thread: safe before exec
    )
    for signum in pending:
        kill_process(host.pid, signum)
    code = host.wait()  # retried after a forwarded signal (PEP 475)
    for sig in FORWARDED:  # nothing stops the power-off half done
        signal.signal(sig, signal.SIG_IGN)
    power_off()
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m spothop.providers.local.watchdog INSTANCE_DIR", file=sys.stderr)
        return 2
    return run(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
