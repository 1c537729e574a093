"""``spothop agent run`` execs the light agent; bad options are one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spothop.agent import read_events


def test_spothop_agent_run_supervises_the_command(tmp_path: Path) -> None:
    state = tmp_path / "agent"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spothop.cli.main",
            "agent",
            "run",
            "--protocol",
            "sigterm",
            "--state-dir",
            str(state),
            "--json",
            "--",
            "sh",
            "-c",
            "exit 0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert '"kind": "exited"' in done.stdout  # --json status lines
    assert [e["code"] for e in read_events(state, "worker_exited")] == [0]


def test_a_missing_command_or_a_bad_hook_is_a_usage_error(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "spothop.agent", "run", "--state-dir", str(tmp_path)]
    missing = subprocess.run(base, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 2 and "no worker command" in missing.stderr
    hook = subprocess.run(
        [*base, "--lease-releaser", "nope", "--", "true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert hook.returncode == 2 and "module:attribute" in hook.stderr
