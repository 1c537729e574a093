"""`spothop controller run` serves the agent API: its URL in controller.json, a registration through it,
the same URL after a restart.

One real process (the background controller `spothop launch` starts), on the local cloud: its
loopback URL is what every launch gives its agent, with a token of the instance's own.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from spothop.controlplane import Heartbeat, HttpControlPlane, Registration
from spothop.db import shared_engine
from spothop.jobs.controller import daemon
from spothop.state.agent_tables import agent_heartbeats
from spothop.state.tokens import TokenStore
from tests.waiting import process_running, wait_for


def test_the_controller_serves_the_agent_api_on_loopback(
    spothop_home: Path, tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    info = daemon.start_background(spothop_home, store_url)
    try:
        info = wait_for(
            lambda: i if (i := daemon.status(spothop_home)) and i.control_plane_url else None,
            30,
            what="controller.json's control_plane_url",
        )
        url = info.control_plane_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        token = TokenStore(store_url).issue_agent_token("job-1", "i-1")
        plane = HttpControlPlane(url, "i-1", token=token, spool_dir=tmp_path / "spool", attempts=3)
        plane.register(Registration(instance_id="i-1", provider="local", worker_id="w-1"))
        with shared_engine(store_url).connect() as conn:
            rows = conn.execute(
                select(agent_heartbeats.c.job_id).where(agent_heartbeats.c.instance_id == "i-1")
            ).all()
        assert [r.job_id for r in rows] == ["job-1"]  # the token's job, filled in by the server
    finally:
        _stop(spothop_home)
    # A restarted controller answers on the same URL: the running instances were given it.
    daemon.start_background(spothop_home, store_url)
    try:
        again = wait_for(
            lambda: i if (i := daemon.status(spothop_home)) and i.control_plane_url else None,
            30,
            what="the restarted controller's control_plane_url",
        )
        assert again.control_plane_url == url
        plane.heartbeat(Heartbeat("i-1", "w-1", 1_800_000_000.0, "running", 7, 0, None, False))
    finally:
        _stop(spothop_home)


def _stop(home: Path) -> None:
    stopped = daemon.stop(home)
    if stopped is not None and stopped.pid:
        wait_for(lambda: not process_running(stopped.pid), 20, what="the controller's exit")
