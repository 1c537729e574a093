"""The agent's log shipper against a real HTTP control plane (tests' ControlServer over SQLite):
the worker's file is shipped in order, waits while the server is down, resumes from the persisted
offset after a restart, resyncs on a gap, and never stores a byte twice."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.agent.logship import LogShipper
from spothop.controlplane import HttpControlPlane
from spothop.db import shared_engine
from spothop.state import ensure_schema
from spothop.state.worker_logs import read_after
from spothop.wire.logs import worker_log_path
from tests.controlplane.control_server import ControlServer

INSTANCE = "i-ship"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ControlServer]:
    with ControlServer(f"sqlite:///{tmp_path / 'store.db'}") as served:
        yield served


def _shipper(server: ControlServer, tmp_path: Path, **kwargs: object) -> LogShipper:
    plane = HttpControlPlane(
        server.url, INSTANCE, token=None, spool_dir=tmp_path / "spool", attempts=1, backoff_s=0.01
    )
    return LogShipper(
        plane,
        worker_log_path(tmp_path / "state"),
        instance_id=INSTANCE,
        attempt_id="a-1",
        job_id="job-1",
        **kwargs,  # type: ignore[arg-type]
    )


def _write(tmp_path: Path, raw: bytes) -> None:
    path = worker_log_path(tmp_path / "state")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        handle.write(raw)


def _stored(server: ControlServer) -> bytes:
    engine = shared_engine(server.store_url)
    ensure_schema(engine)  # before the first chunk made the tables
    with engine.connect() as conn:
        return read_after(conn, "job-1", "a-1")[1]


def _log_offsets(server: ControlServer) -> list[int]:
    return [body["offset_bytes"] for m, p, _, body in server.received if p.endswith("/logs")]


def test_the_file_is_shipped_in_ordered_chunks(server: ControlServer, tmp_path: Path) -> None:
    shipper = _shipper(server, tmp_path, chunk_bytes=4)
    assert shipper.ship() is True  # no file yet: nothing to ship
    _write(tmp_path, "step 1 ✓\n".encode())
    assert shipper.ship() is True
    assert _stored(server) == "step 1 ✓\n".encode()
    assert _log_offsets(server) == [0, 4, 8]


def test_while_the_server_is_down_the_file_waits_then_catches_up_once(
    server: ControlServer, tmp_path: Path
) -> None:
    shipper = _shipper(server, tmp_path)
    _write(tmp_path, b"a\n")
    server.down = True
    assert shipper.ship() is False and shipper.failures == 1
    _write(tmp_path, b"b\n")
    server.down = False
    server.fail_next = 1  # stored, but the answer is lost: the resend is skipped
    assert shipper.ship() is False
    assert shipper.ship() is True
    assert _stored(server) == b"a\nb\n"
    assert shipper.acked_bytes == 4 and shipper.failures == 0


def test_a_restarted_agent_resumes_from_the_persisted_offset(
    server: ControlServer, tmp_path: Path
) -> None:
    first = _shipper(server, tmp_path)
    _write(tmp_path, b"before\n")
    assert first.ship() is True
    _write(tmp_path, b"after\n")
    second = _shipper(server, tmp_path)  # a new agent process on the same instance
    assert second.acked_bytes == 7
    assert second.ship() is True
    assert _log_offsets(server) == [0, 7]
    assert _stored(server) == b"before\nafter\n"


def test_a_persisted_offset_past_the_store_resyncs_to_its_end(
    server: ControlServer, tmp_path: Path
) -> None:
    _write(tmp_path, b"0123456789")
    offset_file = worker_log_path(tmp_path / "state").with_name("worker.log.shipped")
    offset_file.write_text(json.dumps({"attempt_id": "a-1", "offset_bytes": 5}))
    shipper = _shipper(server, tmp_path)
    assert shipper.acked_bytes == 5
    assert shipper.ship() is True
    assert _stored(server) == b"0123456789"  # the store said 0: everything from there
    assert json.loads(offset_file.read_text())["offset_bytes"] == 10


def test_the_thread_ships_as_the_file_grows_and_close_flushes_the_rest(
    server: ControlServer, tmp_path: Path
) -> None:
    shipper = _shipper(server, tmp_path, interval_s=0.05)
    shipper.start()
    _write(tmp_path, b"one\n")
    deadline = time.monotonic() + 30
    while _stored(server) != b"one\n":
        assert time.monotonic() < deadline, "the thread did not ship the first line"
        time.sleep(0.02)
    server.down = True  # the rest can only go at close, once the server is back
    _write(tmp_path, b"two\n")
    server.down = False
    assert shipper.close(timeout_s=10) is True
    assert _stored(server) == b"one\ntwo\n"
