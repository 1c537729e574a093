"""Whether a process runs, by its pid (standard library only: the light agent may import it)."""

from __future__ import annotations

import os


def process_running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (exited, not yet reaped by its parent) counts as gone.

    Linux tells a zombie by ``/proc/PID/stat``; elsewhere a pid that answers ``kill(pid, 0)``
    counts as running.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return not os.path.isdir("/proc/self")  # no /proc at all: trust kill(0); else it is gone
    except (OSError, IndexError):
        return True
