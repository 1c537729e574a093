"""Each protocol's watcher against the local cloud's endpoint for it: no notice, notice, lead time, identity."""

from __future__ import annotations

from typing import Any

import pytest

from spothop.agent.model import NoticeKind
from spothop.agent.notices import WATCHERS, make_watcher
from spothop.agent.notices.gcp import GCP_MAINTENANCE_NOTICE_S
from spothop.errors import ConfigError

LEAD_S = 25.0  # below every cloud's documented lead, so no cap applies
PROTOCOLS = ["aws", "gcp", "azure", "aliyun", "tencent", "volcengine"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_notice_then_a_final_notice_with_its_lead_time(protocol: str, endpoint: Any, clock: Any) -> None:
    server = endpoint(protocol)
    watcher = make_watcher(protocol, server.url, poll_interval_s=0.1, clock=clock, assumed_lead_s=LEAD_S)
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
