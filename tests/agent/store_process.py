"""Finding and reading processes from /proc: an agent's embedded store process, its RSS, its heartbeat row."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from tests.waiting import process_running

HOST_MODULE = "spothop.controlplane.host"
# Runs the agent as ``python -m spothop.agent`` does, and writes its sys.modules to $SPOTHOP_TEST_MODULES_DIR:
# on SIGUSR1 (while it watches) to watching.txt, and at exit to exit.txt.
AGENT_WITH_MODULE_DUMPS = """
import atexit, os, pathlib, runpy, signal, sys
out = pathlib.Path(os.environ["SPOTHOP_TEST_MODULES_DIR"])
def dump(name):
    (out / (name + ".tmp")).write_text("\\n".join(sorted(sys.modules)))
    os.replace(out / (name + ".tmp"), out / name)
signal.signal(signal.SIGUSR1, lambda *_: dump("watching.txt"))
atexit.register(dump, "exit.txt")
sys.argv = ["spothop.agent", *sys.argv[1:]]
runpy.run_module("spothop.agent", run_name="__main__", alter_sys=True)
"""


def agent_command(*args: str) -> list[str]:
    """``python -m spothop.agent ARGS`` with the module dumps above."""
    return [sys.executable, "-c", AGENT_WITH_MODULE_DUMPS, *args]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def store_processes(agent_pid: int) -> list[int]:
    """The live embedded store processes the agent ``agent_pid`` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
        if (
            ppid == agent_pid
            and HOST_MODULE.encode() in cmdline
            and process_running(int(entry.name))
        ):
            found.append(int(entry.name))
    return found


def kill_quietly(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def stored_beat(store_url: str, instance_id: str) -> tuple[str, float] | None:
    """The (state, time) of ``instance_id``'s heartbeat row in the store; None before there is one."""
    from sqlalchemy import select
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from spothop.db import shared_engine
    from spothop.state.agent_tables import agent_heartbeats

    try:
        with shared_engine(store_url).connect() as conn:
            row = conn.execute(
                select(agent_heartbeats).where(agent_heartbeats.c.instance_id == instance_id)
            ).first()
    except (OperationalError, ProgrammingError):  # the store process has not migrated the store yet
        return None
    return (row.state, row.time_unix_s) if row is not None else None
