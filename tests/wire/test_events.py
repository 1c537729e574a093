"""Agent events are typed, versioned models; what this code cannot read comes back explicitly."""

from __future__ import annotations

import json

import pytest

from spothop.wire.errors import EventFormatError
from spothop.wire.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    Interruption,
    Saved,
    SelfCheckEvent,
    UnknownEvent,
    event_from_dict,
)

ISSUE_KINDS = {
    "self_check",
    "notice_blind",
    "advance_notice",
    "final_notice",
    "save_requested",
    "saved",
    "leases_released",
    "uploaded",
    "exited",
}


def test_every_kind_the_agent_reports_round_trips_through_plain_json() -> None:
    assert ISSUE_KINDS | {
        "worker_started",
        "worker_exited",
        "watcher_restarted",
        "interruption",
    } <= set(EVENT_TYPES)
    for kind, cls in EVENT_TYPES.items():
        event = cls(
            instance_id="i-1",
            provider="aws",
            region="us-east-1",
            zone="us-east-1a",
            instance_type="g5.xlarge",
        )
        data = json.loads(json.dumps(event.to_dict()))
        assert data["kind"] == kind and data["schema_version"] == SCHEMA_VERSION
        assert event_from_dict(data) == event


def test_each_event_has_its_own_id_and_the_fields_the_store_filters_on() -> None:
    a, b = (Interruption(instance_id="i-1", lead_time_s=30.0, cause="preempted") for _ in range(2))
    assert a.event_id != b.event_id and len(a.event_id) == 32
    data = a.to_dict()
    assert {
        "instance_id",
        "provider",
        "region",
        "zone",
        "instance_type",
        "time_unix_s",
        "lead_time_s",
        "cause",
    } <= set(data)
    nested = Saved(instance_id="i-1", outcome="saved", detail={"step": 7, "files": ["a", "b"]})
    assert event_from_dict(json.loads(json.dumps(nested.to_dict()))).detail == {
        "step": 7,
        "files": ["a", "b"],
    }


def test_an_unknown_kind_comes_back_whole_as_an_unknown_event() -> None:
    data = {
        "kind": "gpu_fell_off_the_bus",
        "event_id": "e1",
        "instance_id": "i-1",
        "schema_version": 1,
        "time_unix_s": 5.0,
        "bus_id": "0000:3b:00.0",
    }
    event = event_from_dict(data)
    assert isinstance(event, UnknownEvent) and "unknown kind" in event.reason
    assert event.fields == {"bus_id": "0000:3b:00.0"} and event.to_dict() == {
        **data,
        "provider": "",
        "region": "",
        "zone": "",
        "instance_type": "",
        "job_id": "",
        "worker_id": "",
    }


def test_a_newer_schema_version_is_not_read_as_todays_model() -> None:
    data = {**SelfCheckEvent(instance_id="i-1").to_dict(), "schema_version": SCHEMA_VERSION + 1}
    event = event_from_dict(data)
    assert isinstance(event, UnknownEvent) and "upgrade spothop" in event.reason
    assert (
        event.to_dict()["schema_version"] == SCHEMA_VERSION + 1
        and event.to_dict()["kind"] == "self_check"
    )


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        ({"kind": "exited", "instance_id": "i-1"}, "event_id"),
        ({"kind": "exited", "event_id": "e", "instance_id": ""}, "instance_id"),
        (
            {"kind": "exited", "event_id": "e", "instance_id": "i", "schema_version": "one"},
            "schema_version",
        ),
        (
            {"kind": "exited", "event_id": "e", "instance_id": "i", "time_unix_s": "noon"},
            "time_unix_s",
        ),
    ],
)
def test_a_malformed_event_is_an_error_naming_the_field(
    broken: dict[str, object], field: str
) -> None:
    with pytest.raises(EventFormatError, match=field):
        event_from_dict(broken)
