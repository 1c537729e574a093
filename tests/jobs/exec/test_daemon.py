"""One controller per home: the lock, the pid file, the second controller's message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spothop.jobs.controller import daemon
from tests.waiting import process_running, wait_for

HOLDER = """
import sys, time
from spothop.jobs.controller import daemon
lock = daemon.acquire()
lock.write_info("sqlite:///x.db")
print("held", flush=True)
time.sleep(600)
"""


def test_the_lock_is_exclusive_and_names_the_holder(spothop_home: Path) -> None:
    lock = daemon.acquire()
    info = lock.write_info("sqlite:///store.db")
    try:
        assert daemon.status() == info
        with pytest.raises(daemon.ControllerRunning) as raised:
            daemon.acquire()
        assert str(os.getpid()) in str(raised.value)
        assert "controller stop" in str(raised.value)
    finally:
        lock.release()
    assert daemon.status() is None
    daemon.acquire().release()


def test_a_sigkilled_holder_leaves_no_stale_lock(spothop_home: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, env={**os.environ}
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        info = daemon.status()
        assert info is not None and info.pid == holder.pid
        with pytest.raises(daemon.ControllerRunning):
            daemon.acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        wait_for(lambda: not process_running(holder.pid), 10, what="the holder's end")
        assert daemon.status() is None
        daemon.acquire().release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


GATED_HOLDER = """
import sys, time
from pathlib import Path
from spothop.jobs.controller import daemon
lock = daemon.acquire()
print("locked", flush=True)
while not Path(sys.argv[1]).exists():
    time.sleep(0.01)
lock.write_info("sqlite:///y.db")
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_controllers_info_is_never_taken_for_its_successors(
    spothop_home: Path, tmp_path: Path
) -> None:
    """A SIGKILLed controller leaves its controller.json; its successor takes the lock a moment
    before it writes its own. status() in between must not name the dead one (a CI run of the
    two-SIGKILL test was handed the killed pid as the restarted controller's)."""
    dead = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE)
    assert dead.stdout is not None and dead.stdout.readline().strip() == b"held"
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    assert (spothop_home / "controller" / "controller.json").exists()  # left behind
    assert daemon.status() is None
    gate = tmp_path / "go"
    successor = subprocess.Popen(
        [sys.executable, "-c", GATED_HOLDER, str(gate)], stdout=subprocess.PIPE
    )
    try:
        assert successor.stdout is not None and successor.stdout.readline().strip() == b"locked"
        between = daemon.status()  # the lock held, the file still the dead one's
        assert between is not None and between.pid != dead.pid
        assert between.pid == 0  # a controller runs; which, it has not said yet
        with pytest.raises(daemon.ControllerRunning) as raised:
            daemon.acquire()
        assert str(dead.pid) not in str(raised.value)
        gate.touch()
        assert successor.stdout.readline().strip() == b"held"
        info = daemon.status()
        assert info is not None and info.pid == successor.pid
    finally:
        successor.kill()
        successor.wait()
