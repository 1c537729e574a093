"""Heartbeat sinks: SQLite rows for embedded mode, an HTTP POST with a timeout for server mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.agent.heartbeat import Heartbeat, HttpHeartbeats, SqliteHeartbeats
from tests.agent.stubs import StubServer, canned

BEAT = Heartbeat("i-1", "w-1", 1_800_000_000.0, "running", 123, 0, None, False)


def test_sqlite_keeps_the_latest_beat_per_instance(tmp_path: Path) -> None:
    sink = SqliteHeartbeats(tmp_path / "hb.db")
    sink.beat(BEAT)
    later = Heartbeat("i-1", "w-1", BEAT.time_unix_s + 10, "preempting", 123, 1, 5.0, True)
    sink.beat(later)
    assert sink.latest("i-1") == later and sink.latest("i-2") is None


def test_http_posts_json_to_the_server() -> None:
    with StubServer(canned({}, default=(204, ""))) as server:
        HttpHeartbeats(server.url + "/api/heartbeats").beat(BEAT)
    [(method, path, _headers, body)] = server.requests
    assert (method, path) == ("POST", "/api/heartbeats") and json.loads(body)["instance_id"] == "i-1"


def test_http_raises_on_an_error_status_and_on_a_hung_server() -> None:
    with StubServer(canned({}, default=(503, "down"))) as server, pytest.raises(OSError):
        HttpHeartbeats(server.url).beat(BEAT)
    with StubServer(canned({}, default=(200, "sleep:2"))) as server, pytest.raises(OSError):
        HttpHeartbeats(server.url, timeout_s=0.2).beat(BEAT)
