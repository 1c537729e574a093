"""Each protocol's watcher against the local cloud's endpoint for it: no notice, notice, lead time, identity."""

from __future__ import annotations

import email.utils
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from spothop.agent import EXIT_DONE, Agent, AgentConfig, read_events
from spothop.agent.model import NoticeKind
from spothop.agent.notices import WATCHERS, make_watcher
from spothop.agent.notices.aws import AWS_POLL_INTERVAL_S
from spothop.agent.notices.gcp import GCP_MAINTENANCE_NOTICE_S
from spothop.errors import ConfigError
from spothop.providers.local.metadata import ScheduledEvent
from tests.agent.stubs import StubServer, canned
from tests.waiting import scaled

LEAD_S = 25.0  # below every cloud's documented lead, so no cap applies
PROTOCOLS = ["aws", "gcp", "azure", "aliyun", "tencent", "volcengine"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_notice_then_a_final_notice_with_its_lead_time(
    protocol: str, endpoint: Any, clock: Any
) -> None:
    server = endpoint(protocol)
    watcher = make_watcher(
        protocol, server.url, poll_interval_s=0.1, clock=clock, assumed_lead_s=LEAD_S
    )
    identity = watcher.self_check()
    assert identity.instance_id == "i-0abc"
    assert identity.zone == "us-east-1a" and identity.instance_type == "g5.xlarge"
    assert watcher.poll() == []
    server.notices.schedule_termination(clock.t, clock.t + LEAD_S)
    [notice] = watcher.poll()
    assert notice.kind is NoticeKind.FINAL and notice.protocol == protocol
    assert notice.lead_time_s == pytest.approx(LEAD_S, abs=1.0)  # clouds print whole seconds
    assert notice.deadline == pytest.approx(clock.t + LEAD_S, abs=1.0)
    assert notice.raw


def test_tencent_time_is_read_as_utc_plus_8(endpoint: Any, clock: Any) -> None:
    server = endpoint("tencent")
    watcher = make_watcher("tencent", server.url, clock=clock)
    server.notices.schedule_termination(clock.t, clock.t + 100)
    [notice] = watcher.poll()
    assert notice.deadline == pytest.approx(clock.t + 100, abs=1.0)  # not 8 hours off


def test_aws_rebalance_recommendation_is_an_advance_notice(endpoint: Any, clock: Any) -> None:
    server = endpoint("aws")
    watcher = make_watcher("aws", server.url, clock=clock)
    server.notices.recommend_rebalance(clock.t - 5)
    [notice] = watcher.poll()
    assert notice.kind is NoticeKind.ADVANCE and notice.cause == "rebalance-recommendation"
    assert notice.notice_time == pytest.approx(clock.t - 5, abs=1.0) and notice.deadline is None


def test_aws_token_is_refreshed_before_expiry_and_on_401(endpoint: Any, clock: Any) -> None:
    server = endpoint("aws")
    watcher = make_watcher("aws", server.url, clock=clock, token_ttl_s=8)
    assert watcher.poll() == []
    first = watcher._token  # type: ignore[attr-defined]
    clock.t += 7  # within the refresh margin (a quarter of the TTL): a new token before it expires
    assert watcher.poll() == []
    assert watcher._token != first  # type: ignore[attr-defined]
    watcher._token_expires = clock.t + 1000  # type: ignore[attr-defined]  # it thinks the token is good...
    clock.t += 20  # ...but the endpoint expired it: 401, refresh, retry
    assert watcher.poll() == []


def test_gcp_maintenance_events(endpoint: Any, clock: Any) -> None:
    server = endpoint("gcp")
    watcher = make_watcher("gcp", server.url, clock=clock, poll_interval_s=0.1)
    server.notices.set_maintenance("MIGRATE_ON_HOST_MAINTENANCE")
    [advance] = watcher.poll()
    assert advance.kind is NoticeKind.ADVANCE and advance.cause == "maintenance-event"
    server.notices.set_maintenance("TERMINATE_ON_HOST_MAINTENANCE")
    [final] = watcher.poll()
    assert final.kind is NoticeKind.FINAL and final.lead_time_s == GCP_MAINTENANCE_NOTICE_S


def test_gcp_long_poll_returns_when_preempted_changes(endpoint: Any, clock: Any) -> None:
    import threading

    server = endpoint("gcp")
    watcher = make_watcher("gcp", server.url, clock=clock, poll_interval_s=30, assumed_lead_s=30)
    assert watcher.poll() == []  # learns the ETag
    timer = threading.Timer(0.2, lambda: server.notices.schedule_termination(clock.t, clock.t + 30))
    timer.start()
    [notice] = watcher.poll()  # a hanging GET of up to 30 s, woken by the change
    timer.join()
    assert notice.cause == "preempted" and notice.lead_time_s == 30


def test_azure_acknowledges_the_preempt_event(endpoint: Any, clock: Any) -> None:
    server = endpoint("azure")
    watcher = make_watcher("azure", server.url, clock=clock)
    watcher.self_check()
    server.notices.schedule_termination(clock.t, clock.t + 30)
    [notice] = watcher.poll()
    assert notice.cause == "Preempt" and notice.event_id == server.notices.event_id
    assert not server.notices.acknowledged
    watcher.acknowledge(notice)
    assert server.notices.acknowledged


def test_aliyun_hardened_mode_with_tokens_required(endpoint: Any, clock: Any) -> None:
    server = endpoint("aliyun", require_token=True)
    watcher = make_watcher("aliyun", server.url, clock=clock)
    assert watcher.self_check().instance_id == "i-0abc"
    server.notices.schedule_termination(clock.t, clock.t + 300)
    [notice] = watcher.poll()
    assert notice.lead_time_s == pytest.approx(300, abs=1)


def test_every_protocol_has_a_watcher_and_unknown_names_are_refused() -> None:
    from spothop.providers.local.metadata import PROTOCOLS

    assert set(PROTOCOLS) | {"sigterm"} == set(WATCHERS)
    with pytest.raises(ConfigError, match="unknown notice protocol 'ibm'"):
        make_watcher("ibm", None)


HANG_TIMEOUT_S = (
    0.3  # the watcher's HTTP timeout where the token PUT hangs: how long the fallback takes
)


@pytest.mark.parametrize(
    ("mode", "reason"), [("refused", "refused (HTTP 403)"), ("hang", "no answer")]
)
def test_aws_falls_back_to_imdsv1_once_and_still_sees_every_notice(
    mode: str, reason: str, endpoint: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = endpoint("aws", tokens=mode)
    watcher = make_watcher("aws", server.url, clock=clock, timeout_s=scaled(HANG_TIMEOUT_S))
    with caplog.at_level(logging.WARNING, logger="spothop.agent.notices.aws"):
        identity = watcher.self_check()
        assert identity.instance_id == "i-0abc"
        [fallback] = identity.fallbacks
        assert fallback.startswith("IMDSv1") and reason in fallback
        assert reason in (watcher.imdsv1_reason or "")  # type: ignore[attr-defined]
        for _ in range(3):
            assert watcher.poll() == []
        server.notices.recommend_rebalance(clock.t)
        server.notices.schedule_termination(clock.t, clock.t + 100)
        [notice] = watcher.poll()
    assert notice.kind is NoticeKind.FINAL and notice.lead_time_s == pytest.approx(100, abs=1.0)
    [logged] = caplog.records  # once, not once a poll
    assert "IMDSv1" in logged.getMessage()


def test_aws_with_working_tokens_reports_no_fallback(endpoint: Any, clock: Any) -> None:
    for mode in ("required", "optional"):
        watcher = make_watcher("aws", endpoint("aws", tokens=mode).url, clock=clock)
        assert watcher.self_check().fallbacks == ()
        assert watcher.imdsv1_reason is None  # type: ignore[attr-defined]


def test_the_imdsv1_fallback_is_in_the_agents_recorded_self_check(
    endpoint: Any, tmp_path: Path
) -> None:
    server = endpoint("aws", tokens="refused")
    config = AgentConfig(
        command=["true"],
        protocol="aws",
        state_dir=tmp_path / "agent",
        metadata_url=server.url,
        instance_id="i-0abc",
        probe_first_boot=False,
    )
    assert Agent(config).run() == EXIT_DONE
    [check] = read_events(config.state_dir, "self_check")
    assert not check["notice_blind"]
    assert any("IMDSv1" in f and "403" in f for f in check["identity"]["fallbacks"])


def test_aws_scheduled_maintenance_is_an_advance_notice_with_its_not_before(
    endpoint: Any, clock: Any
) -> None:
    server = endpoint("aws")
    watcher = make_watcher("aws", server.url, clock=clock)
    assert watcher.poll() == []
    server.notices.set_scheduled_events(
        [
            ScheduledEvent("instance-event-1", "instance-stop", clock.t + 600, clock.t + 4200),
            ScheduledEvent(
                "instance-event-2", "system-reboot", clock.t + 60, clock.t + 960, state="canceled"
            ),
            ScheduledEvent(
                "instance-event-3",
                "instance-retirement",
                clock.t - 900,
                clock.t - 60,
                state="completed",
            ),
        ]
    )
    [notice] = watcher.poll()
    assert notice.kind is NoticeKind.ADVANCE and notice.cause == "scheduled-event:instance-stop"
    assert notice.event_id == "instance-event-1"
    assert notice.deadline == pytest.approx(clock.t + 600, abs=1.0)
    assert notice.lead_time_s == pytest.approx(600, abs=1.0)


def test_an_active_scheduled_event_already_under_way_is_due_now(endpoint: Any, clock: Any) -> None:
    server = endpoint("aws")
    server.notices.set_scheduled_events(
        [ScheduledEvent("e-1", "system-maintenance", clock.t - 300, clock.t + 300)]
    )
    [notice] = make_watcher("aws", server.url, clock=clock).poll()
    assert notice.deadline == clock.t and notice.lead_time_s == 0


@pytest.mark.parametrize(
    "protocol", [p for p in PROTOCOLS if p != "gcp"]
)  # GCP's notice carries no time
def test_a_notice_whose_time_has_passed_is_recorded_as_due_now(
    protocol: str, endpoint: Any, clock: Any
) -> None:
    server = endpoint(protocol)
    watcher = make_watcher(protocol, server.url, clock=clock)
    watcher.self_check()
    server.notices.schedule_termination(clock.t - 200, clock.t - 100)
    [notice] = watcher.poll()
    assert notice.kind is NoticeKind.FINAL
    assert notice.deadline == clock.t and notice.lead_time_s == 0


def test_each_protocol_polls_at_its_own_default_within_the_clouds_limits() -> None:
    intervals = {
        name: make_watcher(name, "http://127.0.0.1:9").poll_interval_s for name in WATCHERS
    }
    assert intervals["aws"] == AWS_POLL_INTERVAL_S == 0.2
    assert (
        intervals["azure"] == 0.25
    )  # Azure IMDS takes 5 requests/s per VM: one a poll leaves one spare
    assert all(
        intervals[name] <= 0.25 for name in ("aws", "azure", "aliyun", "tencent", "volcengine")
    )
    assert make_watcher("aws", "http://127.0.0.1:9", poll_interval_s=1.5).poll_interval_s == 1.5


def test_azure_maintenance_is_an_advance_notice_with_its_not_before() -> None:
    start = time.time() + 600
    document = {
        "DocumentIncarnation": 1,
        "Events": [
            {
                "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                "EventType": "Redeploy",
                "ResourceType": "VirtualMachine",
                "Resources": [],
                "EventStatus": "Scheduled",
                "NotBefore": email.utils.formatdate(start, usegmt=True),
            }
        ],
    }
    with StubServer(canned({"/metadata/scheduledevents": (200, json.dumps(document))})) as server:
        [notice] = make_watcher("azure", server.url).poll()
    assert notice.kind is NoticeKind.ADVANCE and notice.cause == "Redeploy"
    assert notice.event_id == "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
    assert notice.deadline == pytest.approx(start, abs=1.0) and notice.lead_time_s == pytest.approx(
        600, abs=2.0
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_protocols_identity_carries_the_private_address_its_endpoint_serves(
    protocol: str, clock: Any
) -> None:
    from spothop.providers.local.metadata import InstanceMetadata, MetadataServer, NoticeState

    metadata = InstanceMetadata(
        instance_id="i-0abc",
        instance_type="g5.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        provider=f"{protocol}-sim",
        launch_time=clock.t,
        private_address="10.1.2.3",
    )
    server = MetadataServer(protocol, metadata, NoticeState(clock=clock))
    server.start()
    try:
        identity = make_watcher(protocol, server.url, clock=clock).self_check()
    finally:
        server.stop()
    assert identity.instance_id == "i-0abc"
    assert identity.private_address == "10.1.2.3"


def test_an_address_the_endpoint_does_not_answer_leaves_the_identity_whole(clock: Any) -> None:
    """The private address is no notice's concern: a 404 for it fails no self-check."""
    server = StubServer(
        canned(
            {
                "/latest/meta-data/instance-id": (200, "ins-0abc"),
                "/latest/meta-data/instance/instance-type": (200, "GN7.2XLARGE32"),
                "/latest/meta-data/placement/zone": (200, "ap-guangzhou-3"),
                "/latest/meta-data/placement/region": (200, "ap-guangzhou"),
            }
        )
    )
    with server:
        identity = make_watcher("tencent", server.url, clock=clock).self_check()
    assert identity.instance_id == "ins-0abc" and identity.private_address == ""
