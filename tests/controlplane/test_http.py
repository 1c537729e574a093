"""The HTTP control plane: bearer token, retries, the spool through an outage, dedup, a 401 as a clear error."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import pytest

from spothop.controlplane import EventSpool, Heartbeat, HttpControlPlane
from spothop.controlplane.spool import SPOOL_FILE
from spothop.wire.errors import ControlPlaneAuthError, ControlPlaneError
from spothop.wire.events import Exited, WorkerExited
from tests.agent.stubs import StubServer, canned
from tests.controlplane.control_server import ControlServer

TOKEN = "tok-abc123"
BEAT = Heartbeat("i-1", "w-1", 1_800_000_000.0, "running", 1, 0, None, False)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _plane(url: str, tmp_path: Path, **options: float) -> HttpControlPlane:
    return HttpControlPlane(
        url, "i-1", token=TOKEN, spool_dir=tmp_path / "agent", backoff_s=0.01, **options
    )


def _stored_ids(server: ControlServer) -> list[str]:
    return [
        e["event_id"]
        for method, path, _, body in server.received
        if path.endswith("/events")
        for e in body["events"]
    ]


def test_every_call_carries_the_bearer_token_and_json(tmp_path: Path) -> None:
    with ControlServer(f"sqlite:///{tmp_path / 'store.db'}", token=TOKEN) as server:
        plane = _plane(server.url, tmp_path)
        plane.heartbeat(BEAT)
        plane.record(Exited(instance_id="i-1", code=0))
    assert server.paths() == ["/v1/agents/i-1/heartbeat", "/v1/agents/i-1/events"]
    for _, _, headers, _body in server.received:
        assert (
            headers["Authorization"] == f"Bearer {TOKEN}"
            and headers["Content-Type"] == "application/json"
        )
    assert server.received[1][3]["events"][0]["kind"] == "exited"


def test_events_wait_in_the_spool_through_an_outage_and_are_sent_once_it_ends(
    tmp_path: Path,
) -> None:
    port = _free_port()
    plane = _plane(f"http://127.0.0.1:{port}", tmp_path)
    events = [WorkerExited(instance_id="i-1", code=n) for n in range(3)]
    started = time.monotonic()
    for event in events:
        plane.record(event)  # nobody listens: refused, never raised
    assert (
        time.monotonic() - started < 5
    )  # refused at once, then not tried again within the backoff window
    assert [
        json.loads(line)["event_id"]
        for line in (tmp_path / "agent" / SPOOL_FILE).read_text().splitlines()
    ] == [e.event_id for e in events]
    with ControlServer(f"sqlite:///{tmp_path / 'store.db'}", token=TOKEN, port=port) as server:
        plane._outage.window_s, plane._outage.until = 60.0, time.monotonic() + 60  # a long window
        events.append(Exited(instance_id="i-1", code=0))
        plane.record(events[-1])  # within it: spooled, not sent
        assert server.received == []
        # The agent's exit: its last chance, tried at once whatever the window says (a budget
        # a loaded machine's fresh server answers within: flush returns as soon as all is sent).
        assert plane.flush(30) == 0
    assert _stored_ids(server) == [e.event_id for e in events]
    assert EventSpool(tmp_path / "agent").pending() == []  # and the spool on disk is empty too


def test_a_lost_reply_makes_the_agent_resend_and_the_server_stores_it_once(tmp_path: Path) -> None:
    from spothop.market.interruptions import InterruptionStore  # noqa: F401  (the server's store is real)

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ControlServer(url, token=TOKEN) as server:
        plane = _plane(server.url, tmp_path)
        server.fail_next = 1  # stored, but the agent hears 503
        event = WorkerExited(instance_id="i-1", code=3)
        plane.record(event)
        assert len(plane.spool) == 1
        assert plane.flush(5) == 0  # tried again at once, backoff window or not
    assert _stored_ids(server) == [event.event_id, event.event_id]  # sent twice…
    from sqlalchemy import func, select

    from spothop.db import shared_engine
    from spothop.state.agent_tables import agent_events

    with shared_engine(url).connect() as conn:  # …stored once
        assert conn.execute(select(func.count()).select_from(agent_events)).scalar() == 1


def test_a_refused_token_is_a_clear_error_that_never_shows_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with ControlServer(f"sqlite:///{tmp_path / 'store.db'}", token="the-right-one") as server:
        plane = _plane(server.url, tmp_path)
        with pytest.raises(ControlPlaneAuthError, match="refused the agent's token") as raised:
            plane.heartbeat(BEAT)
        with caplog.at_level(logging.DEBUG):
            plane.record(Exited(instance_id="i-1", code=0))
    assert "401" in str(raised.value) and TOKEN not in str(raised.value)
    assert TOKEN not in caplog.text and TOKEN not in repr(plane)
    assert len(server.received) == 2  # a 401 is not retried
    assert len(plane.spool) == 1  # the event waits for a right token


def test_5xx_is_retried_with_backoff_and_a_hung_server_times_out(tmp_path: Path) -> None:
    with StubServer(canned({}, default=(503, "busy"))) as server:
        plane = _plane(server.url, tmp_path, attempts=3)
        with pytest.raises(ControlPlaneError, match="failed 3 times; last: HTTP 503"):
            plane.heartbeat(BEAT)
        assert len(server.requests) == 3
        with pytest.raises(ControlPlaneError, match="unreachable"):
            plane.heartbeat(BEAT)  # within the backoff window: no connection tried
        assert len(server.requests) == 3
    with StubServer(canned({}, default=(200, "sleep:3"))) as server:
        plane = _plane(server.url, tmp_path, timeout_s=0.3, attempts=1)
        started = time.monotonic()
        with pytest.raises(ControlPlaneError, match="timed out"):
            plane.release_leases("w-1")
        assert time.monotonic() - started < 2.5


def test_a_flush_never_outlasts_its_own_timeout_on_a_hung_server(tmp_path: Path) -> None:
    """The exit's flush gives a hung server what is left of its timeout, not a whole call's."""
    with StubServer(canned({}, default=(200, "sleep:5"))) as server:
        plane = _plane(server.url, tmp_path, timeout_s=30.0)
        plane._outage.until = time.monotonic() + 60  # record() spools without trying
        plane.record(Exited(instance_id="i-1", code=0))
        started = time.monotonic()
        assert plane.flush(0.5) == 1  # not taken: it stays in the spool
        took = time.monotonic() - started
        assert len(server.requests) == 1
    assert took < 4.5, (
        took
    )  # bounded by the flush (0.5 s), not by the call's 30 s or the stub's 5 s


def test_the_spool_is_bounded_and_drops_the_oldest_with_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = EventSpool(tmp_path, max_events=3)
    events = [WorkerExited(instance_id="i-1", code=n).to_dict() for n in range(5)]
    with caplog.at_level(logging.WARNING):
        for event in events:
            spool.add(event)
        spool.add(events[-1])  # once per id
    assert [e["code"] for e in spool.pending()] == [2, 3, 4] and spool.dropped == 2
    assert "dropped the 1 oldest, 2 in all" in caplog.text
    assert [e["code"] for e in EventSpool(tmp_path).pending()] == [2, 3, 4]  # it survives a restart
    small = EventSpool(tmp_path / "b", max_bytes=sum(len(json.dumps(e)) + 1 for e in events[3:]))
    for event in events:
        small.add(event)
    assert [e["code"] for e in small.pending()] == [3, 4]
