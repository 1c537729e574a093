"""Volcengine ECS metadata conformance over real HTTP."""

from __future__ import annotations

from tests.providers.local.metadata.conftest import T0, ObservedNotices, Serve, call

TERMINATION = "/latest/spot_instance_termination_time"


def test_termination_time_is_404_until_a_notice_then_utc(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("volcengine")
    assert call(server.url, TERMINATION).status == 404
    notices.schedule_termination(T0, T0 + 300)
    reply = call(server.url, TERMINATION)
    assert (reply.status, reply.body) == (200, "2026-01-01T00:05:00Z")


def test_on_demand_never_shows_a_termination_time(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("volcengine", spot=False)
    notices.schedule_termination(T0, T0 + 300)
    assert call(server.url, TERMINATION).status == 404


def test_identity_items_and_aliases(serve: Serve) -> None:
    server = serve("volcengine")
    assert call(server.url, "/latest/instance_id").body == "i-0123456789abcdef0"
    assert call(server.url, "/latest/meta-data/instance-id").body == "i-0123456789abcdef0"
    # Item names ignore case and take "-" for "_".
    assert call(server.url, "/latest/Instance-ID").body == "i-0123456789abcdef0"
    assert call(server.url, "/latest/instance_type").body == "p4d.24xlarge"
    assert call(server.url, "/latest/region_id").body == "us-east-1"
    assert call(server.url, "/latest/zone_id").body == "us-east-1a"
    assert "instance_id" in call(server.url, "/latest").body.splitlines()


def test_unknown_path_and_method(serve: Serve) -> None:
    server = serve("volcengine")
    assert call(server.url, "/latest/nope").status == 404
    assert call(server.url, "/").status == 404
    assert call(server.url, "/latest/instance_id", "POST", body=b"").status == 405
