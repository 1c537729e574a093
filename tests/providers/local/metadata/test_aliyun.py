"""Alibaba Cloud ECS metadata conformance over real HTTP (normal and hardened mode)."""

from __future__ import annotations

import pytest

from spothop.providers.local.metadata import MetadataServer
from tests.providers.local.metadata.conftest import T0, ManualClock, ObservedNotices, Serve, call

TTL = "X-aliyun-ecs-metadata-token-ttl-seconds"
TOKEN = "X-aliyun-ecs-metadata-token"
TERMINATION = "/latest/meta-data/instance/spot/termination-time"


def token(server: MetadataServer, ttl: int = 21600) -> str:
    reply = call(server.url, "/latest/api/token", "PUT", {TTL: str(ttl)})
    assert reply.status == 200, reply
    return reply.body


def get(server: MetadataServer, path: str, tok: str | None = None) -> tuple[int, str]:
    reply = call(server.url, path, headers={TOKEN: tok} if tok is not None else {})
    return reply.status, reply.body


def test_termination_time_is_404_until_a_notice_then_utc_iso(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("aliyun")
    assert get(server, TERMINATION)[0] == 404
    notices.schedule_termination(T0, T0 + 120)
    assert get(server, TERMINATION) == (200, "2026-01-01T00:02:00Z")


def test_on_demand_never_shows_a_termination_time(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("aliyun", spot=False)
    notices.schedule_termination(T0, T0 + 120)
    assert get(server, TERMINATION)[0] == 404


def test_identity_items(serve: Serve) -> None:
    server = serve("aliyun")
    assert get(server, "/latest/meta-data/instance-id") == (200, "i-0123456789abcdef0")
    assert get(server, "/latest/meta-data/instance/instance-type") == (200, "p4d.24xlarge")
    assert get(server, "/latest/meta-data/zone-id") == (200, "us-east-1a")
    assert get(server, "/latest/meta-data/region-id") == (200, "us-east-1")
    listing = get(server, "/latest/meta-data/")[1].splitlines()
    assert {"instance-id", "instance/", "region-id", "zone-id"} <= set(listing)


def test_default_mode_takes_requests_with_or_without_a_token(serve: Serve) -> None:
    server = serve("aliyun")
    assert get(server, "/latest/meta-data/instance-id")[0] == 200
    assert get(server, "/latest/meta-data/instance-id", token(server))[0] == 200


def test_a_token_that_is_sent_must_be_valid(serve: Serve, clock: ManualClock) -> None:
    server = serve("aliyun")
    assert get(server, "/latest/meta-data/instance-id", "forged")[0] == 401
    tok = token(server, ttl=10)
    clock.advance(10)
    assert get(server, "/latest/meta-data/instance-id", tok)[0] == 401


def test_hardened_mode_requires_a_token(serve: Serve) -> None:
    server = serve("aliyun", options={"require_token": True})
    assert get(server, "/latest/meta-data/instance-id")[0] == 401
    assert get(server, "/latest/meta-data/instance-id", token(server)) == (
        200,
        "i-0123456789abcdef0",
    )


@pytest.mark.parametrize("ttl", [None, "0", "21601", "six-hours"])
def test_token_ttl_outside_1_to_21600_is_400(serve: Serve, ttl: str | None) -> None:
    server = serve("aliyun")
    headers = {} if ttl is None else {TTL: ttl}
    assert call(server.url, "/latest/api/token", "PUT", headers).status == 400


def test_token_put_with_x_forwarded_for_is_refused(serve: Serve) -> None:
    server = serve("aliyun")
    reply = call(server.url, "/latest/api/token", "PUT", {TTL: "60", "X-Forwarded-For": "1.2.3.4"})
    assert reply.status == 403


def test_unknown_path_and_method(serve: Serve) -> None:
    server = serve("aliyun")
    assert get(server, "/latest/meta-data/nope")[0] == 404
    assert get(server, "/elsewhere")[0] == 404
    assert call(server.url, "/latest/meta-data/instance-id", "POST").status == 405
    assert call(server.url, "/latest/api/token").status == 405
