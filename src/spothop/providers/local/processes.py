"""Signals to processes and process groups that may already be gone."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


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
    """Whether ``pid`` runs; a zombie child of ours is reaped and counts as gone, and so does
    another's zombie (a host whose watchdog was killed is left to an init that may not reap)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: it answered kill(0); a zombie still does
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                return handle.read().rpartition(")")[2].split()[:1] != ["Z"]
        except OSError:
            return True  # no /proc here (or it just ended): kill(0)'s answer stands
    return done == 0


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux), as a VM's init does: a process that
    left the bootstrap command's group still belongs to the instance. False
    where the platform cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


ROOT_ENV = "LOCAL_CLOUD_ROOT"  # where an unisolated instance's disk is (isolation.prepare)


def instance_processes(root: Path) -> list[int]:
    """The live processes of the local instance whose disk is ``root``, as far as /proc tells
    (empty where there is none): those chrooted there (isolated) and those whose environment
    names it as ``LOCAL_CLOUD_ROOT`` (unisolated; the boot script's, the agent's, a worker's
    that kept its environment). Another user's processes are not read."""
    want_root = os.path.realpath(root)
    marker = f"{ROOT_ENV}={want_root}".encode()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.readlink(f"/proc/{entry}/root") == want_root:
                found.append(int(entry))
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def reap_children(keep: int) -> None:
    """Collect exited children other than ``keep`` (adopted orphans), so they leave no zombies."""
    me = str(os.getpid())
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == keep:
                continue
            with contextlib.suppress(OSError, IndexError, ChildProcessError):
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                if fields[0] == "Z" and fields[1] == me:
                    os.waitpid(int(entry), os.WNOHANG)
