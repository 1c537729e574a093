"""The home's agent API is a process of its own, which outlives the controller.

Real processes (the background controller `spothop launch` starts, and the agent API it starts):
its loopback URL is in controller.json and is what every launch gives its agent; a registration
goes through it; a SIGKILLed controller leaves it answering and storing events; the next
controller reuses it (same pid, same URL); `spothop controller stop` ends both. A controller of
another store replaces it on the same port; a start that fails names the log's tail.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
from pathlib import Path

import pytest
from sqlalchemy import select

from spothop.cli.main import main
from spothop.controlplane import HttpControlPlane, Registration
from spothop.db import shared_engine
from spothop.errors import ConfigError
from spothop.jobs.controller import daemon
from spothop.server.agent_process import AgentApiStartFailed, answers, ensure_agent_api
from spothop.state.agent_tables import agent_events, agent_heartbeats
from spothop.state.tokens import TokenStore
from spothop.wire.events import WorkerStarted
from tests.waiting import process_running, wait_for


def _started(home: Path, store_url: str) -> daemon.ControllerInfo:
    daemon.start_background(home, store_url)
    return wait_for(
        lambda: i if (i := daemon.status(home)) and i.control_plane_url else None,
        60,
        what="controller.json's control_plane_url",
    )


def _cli(*args: str) -> dict[str, object]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0, out.getvalue()
    return dict(json.loads(out.getvalue()))


def test_the_agent_api_outlives_a_killed_controller_and_the_next_one_reuses_it(
    spothop_home: Path, tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    info = _started(spothop_home, store_url)
    agents = daemon.agent_api_status(spothop_home)
    try:
        url = info.control_plane_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        assert agents is not None and agents.url == url and agents.pid != info.pid
        assert os.getsid(agents.pid) == agents.pid  # a session of its own
        status = _cli("controller", "status", "--json")
        assert status["agent_api"] == agents.to_dict()
        token = TokenStore(store_url).issue_agent_token("job-1", "i-1")
        plane = HttpControlPlane(url, "i-1", token=token, spool_dir=tmp_path / "spool", attempts=3)
        plane.register(Registration(instance_id="i-1", provider="local", worker_id="w-1"))
        with shared_engine(store_url).connect() as conn:
            rows = conn.execute(
                select(agent_heartbeats.c.job_id).where(agent_heartbeats.c.instance_id == "i-1")
            ).all()
        assert [r.job_id for r in rows] == ["job-1"]  # the token's job, filled in by the server

        # SIGKILL the controller: the agent API still answers, and stores the agent's event.
        os.kill(info.pid, signal.SIGKILL)
        wait_for(lambda: daemon.status(spothop_home) is None, 20, what="the killed lock freed")
        assert answers(url)
        plane.record(WorkerStarted(instance_id="i-1", job_id="job-1", worker_id="w-1", pid=7))
        assert plane.flush(10) == 0
        with shared_engine(store_url).connect() as conn:
            kinds = conn.execute(
                select(agent_events.c.kind).where(agent_events.c.instance_id == "i-1")
            ).all()
        assert [k.kind for k in kinds] == ["worker_started"]

        # The next controller reuses it: the same process, the same URL.
        again = _started(spothop_home, store_url)
        assert again.pid != info.pid and again.control_plane_url == url
        assert daemon.agent_api_status(spothop_home) == agents
    finally:
        stopped = _cli("controller", "stop", "--json")
    # `controller stop` ends both.
    assert stopped["agent_api"] == agents.to_dict()
    assert not process_running(agents.pid)
    assert not process_running(int(str(stopped["pid"])))
    assert daemon.agent_api_status(spothop_home) is None and not answers(url)


def test_a_controller_of_another_store_replaces_the_agent_api_on_its_port(
    spothop_home: Path, tmp_path: Path
) -> None:
    a_url = f"sqlite:///{tmp_path / 'a.db'}"
    first = ensure_agent_api(spothop_home, None, a_url, a_url)
    try:
        assert ensure_agent_api(spothop_home, None, a_url, a_url).info == first.info
        b_url = f"sqlite:///{tmp_path / 'b.db'}"
        second = ensure_agent_api(spothop_home, None, b_url, b_url)
        assert second.info.pid != first.info.pid and second.url == first.url
        assert not process_running(first.info.pid)
        assert answers(second.url)
    finally:
        daemon.stop_agent_api(spothop_home)
    wait_for(lambda: not answers(first.url), 10, what="the agent API's exit")


def test_an_agent_port_in_use_and_a_failed_start_are_clear_errors(
    spothop_home: Path, tmp_path: Path
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with taken, pytest.raises(ConfigError, match=f"--agent-port {port}: cannot listen"):
        ensure_agent_api(spothop_home, port, url, url)
    nowhere = f"sqlite:///{tmp_path / 'no-such-folder' / 'store.db'}"
    try:
        with pytest.raises(AgentApiStartFailed, match=r"agent-api\.log") as failed:
            ensure_agent_api(spothop_home, None, nowhere, nowhere)
    finally:
        daemon.stop_agent_api(spothop_home)  # (had it started)
    assert "exited with" in str(failed.value) and "unable to open database" in str(failed.value)
    assert "Traceback" not in str(failed.value)
    assert daemon.agent_api_status(spothop_home) is None
