"""The emergency protocol against each control plane: a real agent process, a real worker, a real queue.

The worker claims two shards and ignores SIGTERM, so only the agent can give
its leases back. SIGTERM to the agent is the final notice (``--sigterm-grace``
is its lead). Embedded and HTTP must both end with the leases back in the
queue and the interruption in the store; with the HTTP control plane
unreachable the leases still go back (through the queue directly) and the
events wait in the spool until the server is back.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.controlplane import HttpControlPlane, QueueLeases
from spothop.db import shared_engine
from spothop.market.interruptions import InterruptionStore
from spothop.queue import Shard, open_queue
from spothop.state.agent_tables import agent_events, agent_heartbeats
from tests.conftest import POSTGRES_URL, PROJECT_ROOT
from tests.controlplane.control_server import ControlServer
from tests.waiting import scaled, wait_for

WORKER = str(Path(__file__).with_name("queue_worker.py"))
JOB = "job-cp"
TOKEN = "instance-token-7"
GRACE_S = (
    3.0  # the notice's lead; the worker ignores the stop, so its budget (lead − margin) runs out
)


@dataclass
class Setup:
    tmp: Path
    queue_url: str
    store_url: str

    @property
    def state(self) -> Path:
        return self.tmp / "agent"


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
    with open_queue(queue_url, JOB) as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(4)])
    return Setup(tmp_path, queue_url, f"sqlite:///{tmp_path / 'store.db'}")


def _preempt(
    setup: Setup, control_plane: str, instance_id: str
) -> subprocess.CompletedProcess[str]:
    """Run the agent until the worker holds its leases, SIGTERM it, and return how it ended."""
    command = [
        sys.executable,
        "-m",
        "spothop.agent",
        "run",
        "--protocol",
        "sigterm",
        "--no-probe",
        "--sigterm-grace",
        str(GRACE_S),
        "--safety-margin",
        "1",
        "--poll-interval",
        "0.05",
        "--heartbeat-interval",
        "0.2",
        "--state-dir",
        str(setup.state),
        "--instance-id",
        instance_id,
        "--cloud",
        "aws-sim",
        "--queue-url",
        setup.queue_url,
        "--job-id",
        JOB,
        "--control-plane",
        control_plane,
        "--",
        sys.executable,
        WORKER,
        str(setup.tmp),
        setup.queue_url,
        JOB,
        "2",
    ]
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(PROJECT_ROOT)]))
    env = {**os.environ, "PYTHONPATH": path, "SPOTHOP_AGENT_TOKEN": TOKEN}
    agent = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(
            lambda: (setup.tmp / "started").exists(), timeout_s=30, what="the worker's two leases"
        )
        wait_for(lambda: read_events(setup.state, "self_check"), what="the agent's self-check")
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=scaled(60))
    finally:
        agent.kill()
    return subprocess.CompletedProcess(command, agent.returncode, out, err)


def _leases_are_back(setup: Setup) -> None:
    with open_queue(setup.queue_url, JOB) as queue:
        stats = queue.stats()
    assert (stats.pending, stats.leased, stats.releases) == (4, 0, 2)


def _interruptions(store_url: str, instance_id: str) -> list[object]:
    return [i for i in InterruptionStore(store_url).interruptions() if i.instance_id == instance_id]


@pytest.fixture(params=["sqlite", "postgres"])
def embedded_store(request: pytest.FixtureRequest, setup: Setup) -> str:
    """The embedded control plane's store: the test's SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return setup.store_url
    schema = request.getfixturevalue("pg_schema")
    return f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"


def test_embedded_the_leases_go_back_and_the_interruption_reaches_the_store(
    setup: Setup, embedded_store: str
) -> None:
    done = _preempt(setup, embedded_store, "i-embedded")
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    _leases_are_back(setup)
    [released] = read_events(setup.state, "leases_released")
    assert (released["count"], released["via"]) == (2, "control-plane")
    with shared_engine(embedded_store).connect() as conn:
        kinds = {r.kind for r in conn.execute(select(agent_events.c.kind))}
        [beat] = conn.execute(select(agent_heartbeats)).all()
    assert {
        "self_check",
        "save_requested",
        "saved",
        "leases_released",
        "interruption",
        "exited",
    } <= kinds
    assert beat.instance_id == "i-embedded" and beat.provider == "aws-sim"
    assert len(_interruptions(embedded_store, "i-embedded")) == 1
    [recorded] = read_events(setup.state, "interruption_recorded")
    steps = recorded["steps_s"]
    print(
        f"embedded emergency steps_s: release {steps['release']:.4f} record {steps['record']:.4f}"
    )


@pytest.fixture
def server(setup: Setup) -> Iterator[ControlServer]:
    with ControlServer(
        setup.store_url, token=TOKEN, queue=QueueLeases(setup.queue_url, JOB)
    ) as server:
        yield server


def test_http_the_server_releases_the_leases_and_stores_every_event(
    setup: Setup, server: ControlServer
) -> None:
    done = _preempt(setup, server.url, "i-http")
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    _leases_are_back(setup)
    paths = server.paths()
    assert {
        "/v1/agents/register",
        "/v1/agents/i-http/heartbeat",
        "/v1/agents/i-http/events",
    } <= set(paths)
    assert "/v1/agents/i-http/leases/release" in paths
    assert all(
        headers["Authorization"] == f"Bearer {TOKEN}" for _, _, headers, _ in server.received
    )
    [released] = read_events(setup.state, "leases_released")
    assert (released["count"], released["via"]) == (2, "control-plane")
    assert len(_interruptions(setup.store_url, "i-http")) == 1
    local = {e["event_id"] for e in read_events(setup.state)}
    with shared_engine(setup.store_url).connect() as conn:
        stored = {r.event_id for r in conn.execute(select(agent_events.c.event_id))}
    assert stored == local  # every event of the local log, once
    logs = done.stderr + (setup.state / "events.jsonl").read_text()
    assert TOKEN not in logs


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_http_unreachable_the_queue_takes_the_leases_and_the_events_wait_in_the_spool(
    setup: Setup,
) -> None:
    port = _closed_port()
    done = _preempt(setup, f"http://127.0.0.1:{port}", "i-offline")
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    _leases_are_back(setup)  # the control plane was down; the queue was not
    [released] = read_events(setup.state, "leases_released")
    assert (released["count"], released["via"]) == (2, "queue")
    local = [e["event_id"] for e in read_events(setup.state)]
    with ControlServer(setup.store_url, token=TOKEN, port=port) as server:  # the outage ends
        plane = HttpControlPlane(server.url, "i-offline", token=TOKEN, spool_dir=setup.state)
        assert len(plane.spool) == len(local)
        assert plane.flush(scaled(10)) == 0
    with shared_engine(setup.store_url).connect() as conn:
        stored = [r.event_id for r in conn.execute(select(agent_events.c.event_id))]
    assert sorted(stored) == sorted(local)
    assert len(_interruptions(setup.store_url, "i-offline")) == 1
