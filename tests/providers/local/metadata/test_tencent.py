"""Tencent Cloud CVM metadata conformance over real HTTP."""

from __future__ import annotations

from datetime import UTC, datetime

from spothop.providers.local.metadata._http import china_standard
from tests.providers.local.metadata.conftest import T0, ObservedNotices, Serve, call

TERMINATION = "/latest/meta-data/spot/termination-time"


def test_china_standard_time_matches_the_documented_example() -> None:
    # Tencent's example "2018-08-18 12:05:33" is UTC+8, i.e. 04:05:33 UTC.
    instant = datetime(2018, 8, 18, 4, 5, 33, tzinfo=UTC).timestamp()
    assert china_standard(instant) == "2018-08-18 12:05:33"
    # Crossing midnight in UTC+8 moves the date forward.
    assert (
        china_standard(datetime(2025, 12, 31, 20, 0, 0, tzinfo=UTC).timestamp())
        == "2026-01-01 04:00:00"
    )


def test_termination_time_is_404_until_a_notice_then_utc_plus_8(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("tencent")
    assert call(server.url, TERMINATION).status == 404
    notices.schedule_termination(T0, T0 + 120)  # 2026-01-01T00:02:00Z
    reply = call(server.url, TERMINATION)
    assert (reply.status, reply.body) == (200, "2026-01-01 08:02:00")
    assert reply.header("Content-Type") == "text/plain"


def test_on_demand_never_shows_a_termination_time(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("tencent", spot=False)
    notices.schedule_termination(T0, T0 + 120)
    assert call(server.url, TERMINATION).status == 404


def test_identity_items(serve: Serve) -> None:
    server = serve("tencent")
    assert call(server.url, "/latest/meta-data/instance-id").body == "i-0123456789abcdef0"
    assert call(server.url, "/latest/meta-data/placement/zone").body == "us-east-1a"
    assert call(server.url, "/latest/meta-data/placement/region").body == "us-east-1"
    assert call(server.url, "/latest/meta-data/instance/instance-type").body == "p4d.24xlarge"
    assert call(server.url, "/latest/meta-data/placement/").body == "region\nzone"


def test_unknown_path_and_method(serve: Serve) -> None:
    server = serve("tencent")
    assert call(server.url, "/latest/meta-data/nope").status == 404
    assert call(server.url, "/meta-data/instance-id").status == 404
    assert call(server.url, "/latest/meta-data/instance-id", "PUT", body=b"").status == 405
