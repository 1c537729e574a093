"""Azure IMDS Scheduled Events conformance over real HTTP."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from spothop.providers.local.metadata import MetadataServer
from tests.providers.local.metadata.conftest import (
    T0,
    ManualClock,
    ObservedNotices,
    Reply,
    Serve,
    call,
    instance,
)

EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
HEADERS = {"Metadata": "true"}


def document(server: MetadataServer) -> dict[str, Any]:
    reply = call(server.url, EVENTS, headers=HEADERS)
    assert reply.status == 200, reply
    assert reply.header("Content-Type") == "application/json"
    doc: dict[str, Any] = json.loads(reply.body)
    return doc


def start_requests(server: MetadataServer, payload: object) -> Reply:
    body = json.dumps(payload).encode()
    return call(server.url, EVENTS, "POST", {**HEADERS, "Content-Type": "application/json"}, body)


@pytest.mark.parametrize("headers", [{}, {"Metadata": "false"}, {"Metadata": "yes"}])
def test_without_metadata_true_is_400_with_a_json_error(
    serve: Serve, headers: dict[str, str]
) -> None:
    server = serve("azure")
    reply = call(server.url, EVENTS, headers=headers)
    assert reply.status == 400
    assert json.loads(reply.body) == {
        "error": "Bad request. Required metadata header not specified"
    }


def test_metadata_header_value_is_case_insensitive(serve: Serve) -> None:
    server = serve("azure")
    assert call(server.url, EVENTS, headers={"Metadata": "True"}).status == 200


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/metadata/scheduledevents", "not specified"),
        ("/metadata/scheduledevents?api-version=", "not specified"),
        ("/metadata/scheduledevents?api-version=2099-01-01", "invalid"),
        ("/metadata/instance/compute?api-version=1999-01-01", "invalid"),
    ],
)
def test_missing_or_unsupported_api_version_is_400(serve: Serve, path: str, fragment: str) -> None:
    server = serve("azure")
    reply = call(server.url, path, headers=HEADERS)
    assert reply.status == 400
    body = json.loads(reply.body)
    assert fragment in body["error"]
    assert body["newest-versions"]


def test_x_forwarded_for_is_rejected(serve: Serve) -> None:
    server = serve("azure")
    reply = call(server.url, EVENTS, headers={**HEADERS, "X-Forwarded-For": "10.0.0.1"})
    assert reply.status == 400
    assert "error" in json.loads(reply.body)


def test_no_events_before_a_notice(serve: Serve) -> None:
    assert document(serve("azure")) == {"DocumentIncarnation": 0, "Events": []}


def test_preemption_is_a_scheduled_preempt_event(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("azure")
    event_id = notices.schedule_termination(T0, T0 + 30)
    doc = document(server)
    assert doc["DocumentIncarnation"] == 1
    assert doc["Events"] == [
        {
            "EventId": event_id,
            "EventType": "Preempt",
            "ResourceType": "VirtualMachine",
            "Resources": ["i-0123456789abcdef0"],
            "EventStatus": "Scheduled",
            "NotBefore": "Thu, 01 Jan 2026 00:00:30 GMT",
            "Description": doc["Events"][0]["Description"],
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
    ]
    assert uuid.UUID(event_id)
    assert isinstance(doc["Events"][0]["Description"], str)


def test_start_requests_acknowledges_and_bumps_the_incarnation(
    serve: Serve, notices: ObservedNotices, clock: ManualClock
) -> None:
    server = serve("azure")
    event_id = notices.schedule_termination(T0, T0 + 30)
    assert document(server)["DocumentIncarnation"] == 1
    clock.advance(4)
    reply = start_requests(server, {"StartRequests": [{"EventId": event_id}]})
    assert reply.status == 200
    assert notices.acknowledged
    assert notices.acknowledged_at == T0 + 4
    doc = document(server)
    assert doc["DocumentIncarnation"] == 2
    assert doc["Events"][0]["EventStatus"] == "Started"
    # Approving again is harmless and changes nothing.
    assert start_requests(server, {"StartRequests": [{"EventId": event_id}]}).status == 200
    assert document(server)["DocumentIncarnation"] == 2


@pytest.mark.parametrize(
    "payload",
    [
        {"StartRequests": [{"EventId": "5B2A5FDB-6F3F-4FC3-8A86-E7E8AF5B0C3E"}]},
        {"StartRequests": [{"NotEventId": "x"}]},
        {"StartRequests": "all"},
        {"Something": []},
        ["StartRequests"],
    ],
)
def test_bad_start_requests_are_400_and_acknowledge_nothing(
    serve: Serve, notices: ObservedNotices, payload: object
) -> None:
    server = serve("azure")
    notices.schedule_termination(T0, T0 + 30)
    reply = start_requests(server, payload)
    assert reply.status == 400
    assert "error" in json.loads(reply.body)
    assert not notices.acknowledged
    assert document(server)["DocumentIncarnation"] == 1


def test_start_requests_body_that_is_not_json_is_400(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("azure")
    notices.schedule_termination(T0, T0 + 30)
    reply = call(server.url, EVENTS, "POST", HEADERS, b"{not json")
    assert reply.status == 400
    assert not notices.acknowledged


def test_instance_compute(serve: Serve) -> None:
    md = instance("azure", instance_type="Standard_ND96asr_v4", region="eastus", zone="1")
    server = serve("azure", metadata=md)
    reply = call(server.url, "/metadata/instance/compute?api-version=2021-02-01", headers=HEADERS)
    assert reply.status == 200
    compute = json.loads(reply.body)
    assert compute["vmSize"] == "Standard_ND96asr_v4"
    assert compute["location"] == "eastus"
    assert compute["zone"] == "1"
    assert compute["priority"] == "Spot"
    assert uuid.UUID(compute["vmId"])
    whole = call(server.url, "/metadata/instance?api-version=2021-02-01", headers=HEADERS)
    assert json.loads(whole.body)["compute"] == compute
    ondemand = serve("azure", spot=False)
    regular = call(
        ondemand.url, "/metadata/instance/compute?api-version=2021-02-01", headers=HEADERS
    )
    assert json.loads(regular.body)["priority"] == "Regular"


def test_on_demand_has_no_preempt_event(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("azure", spot=False)
    event_id = notices.schedule_termination(T0, T0 + 30)
    assert document(server)["Events"] == []
    assert start_requests(server, {"StartRequests": [{"EventId": event_id}]}).status == 400


def test_unknown_path_and_method(serve: Serve) -> None:
    server = serve("azure")
    assert (
        call(server.url, "/metadata/nothing?api-version=2020-07-01", headers=HEADERS).status == 404
    )
    assert call(server.url, EVENTS, "PUT", HEADERS, b"{}").status == 405
    compute = "/metadata/instance/compute?api-version=2021-02-01"
    assert call(server.url, compute, "POST", HEADERS, b"{}").status == 405
