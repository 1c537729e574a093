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
