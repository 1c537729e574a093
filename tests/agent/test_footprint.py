"""Small where it must be: the agent while it watches, the worker SDK, and the checkpoint library."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spothop.agent import read_events
from tests.agent.store_process import agent_command, rss_kib, store_processes, stored_beat
from tests.agent.stubs import StubServer, canned
from tests.waiting import wait_for

MAX_RSS_KIB = 30 * 1024  # issue R: the agent "stays under 30 MB RSS" while it watches
HEAVY = (
    "torch",
    "numpy",
    "sqlalchemy",
    "pydantic",
    "typer",
    "rich",
    "boto3",
    "botocore",
    "google",
    "yaml",
)
CLOUD_SDKS = (
    "boto3",
    "botocore",
    "google",
    "alibabacloud",
    "azure",
    "tencentcloud",
    "volcenginesdk",
)


def _loaded(module: str) -> list[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()


def test_the_agent_imports_nothing_heavy() -> None:
    assert [m for m in _loaded("spothop.agent.cli") if m.split(".")[0] in HEAVY] == []


def test_the_worker_sdk_loads_only_the_standard_library() -> None:
    new = set(_loaded("spothop.worker.sdk")) - set(_loaded("sys"))  # what importing the SDK added
    outside = [m for m in new if m.split(".")[0] not in sys.stdlib_module_names]
    assert sorted(m for m in outside if m != "spothop" and not m.startswith("spothop.")) == []


def test_the_checkpoint_library_loads_no_sqlalchemy_and_no_cloud_sdk() -> None:
    loaded = {m.split(".")[0] for m in _loaded("spothop.checkpoint")}
    assert loaded & {"sqlalchemy", *CLOUD_SDKS} == set()


@pytest.mark.parametrize("plane", ["none", "http", "embedded"])
def test_a_watching_agent_stays_under_30_mb_resident(tmp_path: Path, plane: str) -> None:
    state, modules = tmp_path / "agent", tmp_path / "modules"
    modules.mkdir()
    store_url, instance_id = f"sqlite:///{tmp_path / 'store.db'}", "i-footprint"
    with StubServer(canned({}, default=(200, '{"requests": []}'))) as server:
        url = {"http": server.url, "embedded": store_url}.get(plane, "none")
        agent = subprocess.Popen(
            agent_command(
                "run",
                "--protocol",
                "sigterm",
                "--no-probe",
                "--state-dir",
                str(state),
                "--poll-interval",
                "0.05",
                "--control-plane",
                url,
                "--instance-id",
                instance_id,
                "--heartbeat-interval",
                "0.1",
                "--",
                "sleep",
                "30",
            ),
            env={**os.environ, "SPOTHOP_TEST_MODULES_DIR": str(modules)},
        )
        try:
            wait_for(lambda: read_events(state, "self_check"), what="the agent's self-check")
            if plane == "http":  # registered, beating and polling: the link to the server is in use
                wait_for(
                    lambda: (
                        sum(path.endswith("/heartbeat") for _, path, _, _ in server.requests) >= 2
                    ),
                    what="two heartbeats",
                )
            if plane == "embedded":  # beating through its store process, which holds SQLAlchemy
                wait_for(
                    lambda: stored_beat(store_url, instance_id),
                    timeout_s=60,
                    what="a heartbeat in the store",
                )
                assert len(store_processes(agent.pid)) == 1
            assert rss_kib(agent.pid) < MAX_RSS_KIB  # the agent process only, not its store process
            agent.send_signal(signal.SIGUSR1)
            watching = wait_for(
                lambda: (
                    (modules / "watching.txt").exists() and (modules / "watching.txt").read_text()
                ),
                what="the agent's sys.modules",
            )
            assert [m for m in watching.split() if m.split(".")[0] in HEAVY] == []
        finally:
            agent.terminate()  # SIGTERM: a final notice; the agent stops the worker and exits 75
            assert agent.wait(timeout=30) == 75
        # Through the whole emergency protocol too: the store process released and recorded.
        assert "sqlalchemy" not in (modules / "exit.txt").read_text().split()
