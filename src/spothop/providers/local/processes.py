"""Signals to processes and process groups that may already be gone."""

from __future__ import annotations

import contextlib
import os


def kill_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of group ``pgid``; a group that is gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def kill_process(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie child of ours is reaped and counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True  # not our child: it answered kill(0), so it runs
    return done == 0
