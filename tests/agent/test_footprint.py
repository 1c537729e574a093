"""The agent stays small: nothing heavy imported, under 60 MB resident while it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spothop.agent import read_events
from tests.providers.local.conftest import wait_for

MAX_RSS_KIB = 60 * 1024  # issue C: "stays under 60 MB resident"
HEAVY = ("torch", "numpy", "sqlalchemy", "pydantic", "typer", "rich", "boto3", "botocore", "google", "yaml")


def test_the_agent_imports_nothing_heavy() -> None:
    code = "import sys, spothop.agent.cli; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_running_agent_stays_under_60_mb_resident(tmp_path: Path) -> None:
    state = tmp_path / "agent"
    agent = subprocess.Popen([sys.executable, "-m", "spothop.agent", "run", "--protocol", "sigterm",
                              "--state-dir", str(state), "--poll-interval", "0.05", "--", "sleep", "30"])
    try:
        wait_for(lambda: read_events(state, "self_check"))
        assert _rss_kib(agent.pid) < MAX_RSS_KIB
    finally:
        agent.terminate()  # SIGTERM: a final notice; the agent stops the worker and exits 75
        assert agent.wait(timeout=20) == 75
