"""Small where it must be: the agent while it watches, the worker SDK, and the checkpoint library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spothop.agent import read_events
from tests.agent.stubs import StubServer, canned
from tests.waiting import wait_for

MAX_RSS_KIB = 30 * 1024  # issue R: the agent "stays under 30 MB RSS" while it watches
HEAVY = ("torch", "numpy", "sqlalchemy", "pydantic", "typer", "rich", "boto3", "botocore", "google", "yaml")
CLOUD_SDKS = ("boto3", "botocore", "google", "alibabacloud", "azure", "tencentcloud", "volcenginesdk")


def _loaded(module: str) -> list[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_the_agent_imports_nothing_heavy() -> None:
    assert [m for m in _loaded("spothop.agent.cli") if m.split(".")[0] in HEAVY] == []


def test_the_worker_sdk_loads_only_the_standard_library() -> None:
    new = set(_loaded("spothop.worker.sdk")) - set(_loaded("sys"))  # what importing the SDK added
    outside = [m for m in new if m.split(".")[0] not in sys.stdlib_module_names]
    assert sorted(m for m in outside if m != "spothop" and not m.startswith("spothop.")) == []


def test_the_checkpoint_library_loads_no_sqlalchemy_and_no_cloud_sdk() -> None:
    loaded = {m.split(".")[0] for m in _loaded("spothop.checkpoint")}
    assert loaded & {"sqlalchemy", *CLOUD_SDKS} == set()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("plane", ["none", "http"])
def test_a_watching_agent_stays_under_30_mb_resident(tmp_path: Path, plane: str) -> None:
    state = tmp_path / "agent"
    with StubServer(canned({}, default=(200, '{"requests": []}'))) as server:
        url = server.url if plane == "http" else "none"
        agent = subprocess.Popen([sys.executable, "-m", "spothop.agent", "run", "--protocol", "sigterm", "--no-probe",
                                  "--state-dir", str(state), "--poll-interval", "0.05", "--control-plane", url,
                                  "--heartbeat-interval", "0.1", "--", "sleep", "30"])
        try:
            wait_for(lambda: read_events(state, "self_check"), what="the agent's self-check")
            if plane == "http":  # registered, beating and polling: the link to the server is in use
                wait_for(lambda: sum(path.endswith("/heartbeat") for _, path, _, _ in server.requests) >= 2,
                         what="two heartbeats")
            assert _rss_kib(agent.pid) < MAX_RSS_KIB
        finally:
            agent.terminate()  # SIGTERM: a final notice; the agent stops the worker and exits 75
            assert agent.wait(timeout=30) == 75
