"""A ``command:`` worker stopped by SIGTERM leaves no process running: its command, and what that started, end."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from spothop.queue import open_queue
from spothop.queue.model import ShardState
from tests.waiting import process_running, wait_for

# The command starts a grandchild (same process group), writes both pids, then hangs on the shard.
HANG = """
import json, os, subprocess, sys, time
json.load(sys.stdin)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(json.dumps([os.getpid(), grandchild.pid]))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(3600)
"""


def test_sigterm_to_a_command_worker_ends_its_command_and_what_it_started(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    pids = tmp_path / "pids.json"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "hang",
                "input": {"files": [str(tmp_path / "a.bin")]},
                "command": [sys.executable, str(tmp_path / "hang.py"), str(pids)],
                "output": str(tmp_path / "out"),
                "queue": f"sqlite:///{tmp_path / 'q.db'}",
            }
        )
    )
    spothop = [sys.executable, "-m", "spothop.cli.main"]
    subprocess.run([*spothop, "queue", "submit", str(spec)], check=True, capture_output=True)
    worker = subprocess.Popen(
        [*spothop, "queue", "work", str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        child, grandchild = wait_for(
            lambda: pids.exists() and json.loads(pids.read_text()), 60, what="the command to start"
        )
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err.decode()
        wait_for(
            lambda: not process_running(child) and not process_running(grandchild),
            10,
            what="the command and its child to end",
        )
    finally:
        if worker.poll() is None:
            worker.kill()
        for pid in json.loads(pids.read_text()) if pids.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with open_queue(f"sqlite:///{tmp_path / 'q.db'}", "hang") as queue:
        assert queue.get("shard-000000").state == ShardState.PENDING  # released, for another worker
