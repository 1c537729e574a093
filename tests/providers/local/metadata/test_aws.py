"""AWS IMDSv2 conformance over real HTTP."""

from __future__ import annotations

import json

import pytest

from spothop.errors import ConfigError
from spothop.providers.local.metadata import (
    InstanceMetadata,
    MetadataServer,
    NoticeState,
    ScheduledEvent,
)
from spothop.providers.local.metadata.aws import AWS_TOKEN_TTL_MAX_S, aws_event_time
from tests.providers.local.metadata.conftest import (
    T0,
    ManualClock,
    ObservedNotices,
    Serve,
    call,
)

TTL = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN = "X-aws-ec2-metadata-token"


def token(server: MetadataServer, ttl: int = 21600) -> str:
    reply = call(server.url, "/latest/api/token", "PUT", {TTL: str(ttl)})
    assert reply.status == 200, reply
    return reply.body


def get(server: MetadataServer, path: str, tok: str | None = None) -> tuple[int, str]:
    reply = call(server.url, path, headers={TOKEN: tok or token(server)})
    return reply.status, reply.body


def test_token_put_returns_a_text_token_and_echoes_the_ttl(serve: Serve) -> None:
    server = serve("aws")
    reply = call(server.url, "/latest/api/token", "PUT", {TTL: "300"})
    assert reply.status == 200
    assert reply.header("Content-Type") == "text/plain"
    assert reply.header(TTL) == "300"
    assert len(reply.body) >= 32
    assert token(server) != token(server)  # random per request


@pytest.mark.parametrize("ttl", [None, "", "0", "-5", str(AWS_TOKEN_TTL_MAX_S + 1), "abc", "1.5"])
def test_token_ttl_outside_1_to_21600_is_400(serve: Serve, ttl: str | None) -> None:
    server = serve("aws")
    headers = {} if ttl is None else {TTL: ttl}
    assert call(server.url, "/latest/api/token", "PUT", headers).status == 400


@pytest.mark.parametrize("ttl", [1, AWS_TOKEN_TTL_MAX_S])
def test_token_ttl_bounds_are_accepted(serve: Serve, ttl: int) -> None:
    server = serve("aws")
    assert call(server.url, "/latest/api/token", "PUT", {TTL: str(ttl)}).status == 200


def test_token_put_with_x_forwarded_for_is_refused(serve: Serve) -> None:
    server = serve("aws")
    reply = call(server.url, "/latest/api/token", "PUT", {TTL: "60", "X-Forwarded-For": "10.0.0.9"})
    assert reply.status == 403


def test_token_path_only_takes_put(serve: Serve) -> None:
    server = serve("aws")
    assert call(server.url, "/latest/api/token").status == 405


def test_get_without_or_with_unknown_token_is_401(serve: Serve) -> None:
    server = serve("aws")
    assert call(server.url, "/latest/meta-data/instance-id").status == 401
    assert get(server, "/latest/meta-data/instance-id", "not-a-token")[0] == 401
    other = serve("aws")  # tokens are per server
    assert get(server, "/latest/meta-data/instance-id", token(other))[0] == 401


def test_token_expires_on_the_injected_clock(serve: Serve, clock: ManualClock) -> None:
    server = serve("aws")
    tok = token(server, ttl=60)
    clock.advance(59)
    assert get(server, "/latest/meta-data/instance-id", tok) == (200, "i-0123456789abcdef0")
    clock.advance(1)
    assert get(server, "/latest/meta-data/instance-id", tok)[0] == 401
    assert get(server, "/latest/meta-data/instance-id")[0] == 200  # a fresh token works


def test_identity_items(serve: Serve) -> None:
    server = serve("aws")
    tok = token(server)
    assert get(server, "/latest/meta-data/instance-id", tok) == (200, "i-0123456789abcdef0")
    assert get(server, "/latest/meta-data/instance-type", tok) == (200, "p4d.24xlarge")
    assert get(server, "/latest/meta-data/placement/availability-zone", tok) == (200, "us-east-1a")
    assert get(server, "/latest/meta-data/placement/region", tok) == (200, "us-east-1")
    assert get(server, "/latest/meta-data/instance-life-cycle", tok) == (200, "spot")
    assert get(server, "/latest/meta-data/local-ipv4", tok) == (200, "127.0.0.1")  # one machine
    ondemand = serve("aws", spot=False)
    assert get(ondemand, "/latest/meta-data/instance-life-cycle") == (200, "on-demand")


def test_directory_listings(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("aws")
    tok = token(server)
    status, body = get(server, "/latest/meta-data/", tok)
    assert status == 200
    assert set(body.splitlines()) == {
        "instance-id",
        "instance-life-cycle",
        "instance-type",
        "local-ipv4",
        "events/",
        "placement/",
    }
    assert get(server, "/latest/meta-data", tok) == (200, body)
    assert get(server, "/latest/meta-data/placement/", tok) == (200, "availability-zone\nregion")
    notices.schedule_termination(T0, T0 + 120)
    assert "spot/" in get(server, "/latest/meta-data/", tok)[1].splitlines()
    assert get(server, "/latest/meta-data/spot/", tok) == (200, "instance-action\ntermination-time")


def test_spot_interruption_items_are_404_until_a_notice(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("aws")
    tok = token(server)
    assert get(server, "/latest/meta-data/spot/instance-action", tok)[0] == 404
    assert get(server, "/latest/meta-data/spot/termination-time", tok)[0] == 404
    notices.schedule_termination(T0, T0 + 120)
    reply = call(server.url, "/latest/meta-data/spot/instance-action", headers={TOKEN: tok})
    assert reply.status == 200
    assert reply.body == '{"action":"terminate","time":"2026-01-01T00:02:00Z"}'
    assert json.loads(reply.body) == {"action": "terminate", "time": "2026-01-01T00:02:00Z"}
    assert get(server, "/latest/meta-data/spot/termination-time", tok) == (
        200,
        "2026-01-01T00:02:00Z",
    )


def test_rebalance_recommendation_is_404_until_recommended(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("aws")
    tok = token(server)
    assert get(server, "/latest/meta-data/events/recommendations/rebalance", tok)[0] == 404
    notices.recommend_rebalance(T0 + 30.7)  # whole seconds are printed
    status, body = get(server, "/latest/meta-data/events/recommendations/rebalance", tok)
    assert status == 200
    assert json.loads(body) == {"noticeTime": "2026-01-01T00:00:30Z"}
    # The recommendation alone is not an interruption.
    assert get(server, "/latest/meta-data/spot/instance-action", tok)[0] == 404


def test_on_demand_instance_never_shows_spot_items(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("aws", spot=False)
    tok = token(server)
    notices.recommend_rebalance()
    notices.schedule_termination(T0, T0 + 120)
    assert get(server, "/latest/meta-data/spot/instance-action", tok)[0] == 404
    assert get(server, "/latest/meta-data/events/recommendations/rebalance", tok)[0] == 404


def test_unknown_paths_and_methods(serve: Serve) -> None:
    server = serve("aws")
    tok = token(server)
    assert get(server, "/latest/meta-data/no-such-item", tok)[0] == 404
    assert get(server, "/2009-04-04/meta-data/instance-id", tok)[0] == 404
    assert call(server.url, "/latest/meta-data/instance-id", "POST", {TOKEN: tok}).status == 405


SCHEDULED = "/latest/meta-data/events/maintenance/scheduled"


def test_scheduled_events_are_an_empty_list_until_the_cloud_schedules_one(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("aws")
    assert get(server, SCHEDULED) == (200, "[]")
    notices.set_scheduled_events(
        [
            ScheduledEvent(
                "instance-event-0d59937288b749b32",
                "instance-stop",
                T0 + 600,
                T0 + 4200,
                description="The instance is running on degraded hardware",
            ),
            ScheduledEvent(
                "instance-event-01", "system-reboot", T0 - 7200, T0 - 3600, state="completed"
            ),
        ]
    )
    status, body = get(server, SCHEDULED)
    assert status == 200
    assert json.loads(body) == [
        {
            "NotBefore": "1 Jan 2026 00:10:00 GMT",
            "Code": "instance-stop",
            "Description": "The instance is running on degraded hardware",
            "EventId": "instance-event-0d59937288b749b32",
            "NotAfter": "1 Jan 2026 01:10:00 GMT",
            "State": "active",
        },
        {
            "NotBefore": "31 Dec 2025 22:00:00 GMT",
            "Code": "system-reboot",
            "Description": "",
            "EventId": "instance-event-01",
            "NotAfter": "31 Dec 2025 23:00:00 GMT",
            "State": "completed",
        },
    ]
    ondemand = serve(
        "aws", spot=False
    )  # maintenance is not a spot matter: on-demand instances see it too
    assert json.loads(get(ondemand, SCHEDULED)[1])[0]["Code"] == "instance-stop"


def test_event_times_are_printed_as_ec2_prints_them() -> None:
    assert (
        aws_event_time(1548061243) == "21 Jan 2019 09:00:43 GMT"
    )  # the EC2 documentation's example
    assert (
        aws_event_time(T0 + 86400 * 4 + 0.9) == "5 Jan 2026 00:00:00 GMT"
    )  # whole seconds, no zero padding


def test_refused_tokens_are_403_and_plain_gets_are_served(serve: Serve) -> None:
    server = serve("aws", options={"tokens": "refused"})
    assert call(server.url, "/latest/api/token", "PUT", {TTL: "60"}).status == 403
    assert call(server.url, "/latest/meta-data/instance-id").body == "i-0123456789abcdef0"
    assert (
        call(server.url, "/latest/meta-data/instance-id", headers={TOKEN: "made-up"}).status == 401
    )


def test_optional_tokens_serve_gets_with_and_without_one(serve: Serve) -> None:
    server = serve("aws", options={"tokens": "optional"})
    assert get(server, "/latest/meta-data/instance-id") == (
        200,
        "i-0123456789abcdef0",
    )  # with a token
    assert call(server.url, "/latest/meta-data/instance-id").status == 200  # without


def test_a_hanging_token_put_is_never_answered_and_does_not_hold_up_stop(serve: Serve) -> None:
    server = serve("aws", options={"tokens": "hang"})
    with pytest.raises(TimeoutError):
        call(server.url, "/latest/api/token", "PUT", {TTL: "60"}, timeout=0.3)
    assert call(server.url, "/latest/meta-data/instance-id").body == "i-0123456789abcdef0"
    server.stop()  # returns although the hung PUT's handler is still waiting


def test_an_unknown_token_mode_is_refused_naming_the_known_ones() -> None:
    metadata = InstanceMetadata("i-1", "g5.xlarge", "us-east-1", "us-east-1a", "aws-sim", T0)
    with pytest.raises(ConfigError, match=r"tokens='sometimes'.*hang, optional, refused, required"):
        MetadataServer("aws", metadata, NoticeState(), options={"tokens": "sometimes"})
