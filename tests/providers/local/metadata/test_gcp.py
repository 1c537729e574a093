"""GCP metadata server conformance over real HTTP, hanging GETs included."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from spothop.providers.local.metadata import MetadataServer
from spothop.providers.local.metadata.state import MAINTENANCE_TERMINATE
from tests.providers.local.metadata.conftest import (
    T0,
    ObservedNotices,
    Reply,
    Serve,
    call,
    instance,
)
from tests.waiting import scaled

FLAVOR = {"Metadata-Flavor": "Google"}
BASE = "/computeMetadata/v1/instance"


def get(server: MetadataServer, path: str, timeout: float = 5.0) -> Reply:
    return call(server.url, path, headers=FLAVOR, timeout=timeout)


def in_thread(fn: Callable[[], Reply]) -> tuple[threading.Thread, list[Reply]]:
    """Run one request in a daemon thread; its reply lands in the returned list."""
    out: list[Reply] = []

    def run() -> None:
        out.append(fn())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize(
    "headers", [{}, {"Metadata-Flavor": "google"}, {"Metadata-Flavor": "Other"}]
)
def test_without_metadata_flavor_google_is_403(serve: Serve, headers: dict[str, str]) -> None:
    server = serve("gcp")
    reply = call(server.url, f"{BASE}/preempted", headers=headers)
    assert reply.status == 403
    assert reply.header("Metadata-Flavor") == "Google"


def test_x_forwarded_for_is_403(serve: Serve) -> None:
    server = serve("gcp")
    reply = call(server.url, f"{BASE}/id", headers={**FLAVOR, "X-Forwarded-For": "10.1.2.3"})
    assert reply.status == 403


def test_preempted_reads_false_then_true_with_etags(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("gcp")
    before = get(server, f"{BASE}/preempted")
    assert (before.status, before.body) == (200, "FALSE")
    assert before.header("Content-Type") == "text/plain"
    assert before.header("Metadata-Flavor") == "Google"
    assert before.header("ETag")
    assert get(server, f"{BASE}/preempted").header("ETag") == before.header("ETag")
    notices.schedule_termination(T0, T0 + 30)
    after = get(server, f"{BASE}/preempted")
    assert (after.status, after.body) == (200, "TRUE")
    assert after.header("ETag") != before.header("ETag")


def test_hanging_get_returns_when_a_notice_lands(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("gcp")
    thread, out = in_thread(
        lambda: get(server, f"{BASE}/preempted?wait_for_change=true&timeout_sec=30")
    )
    assert notices.waiting.wait(scaled(5.0)), "the request never started waiting"
    begun = time.monotonic()
    notices.schedule_termination(T0, T0 + 30)
    thread.join(scaled(5.0))
    assert not thread.is_alive()
    assert out[0].status == 200 and out[0].body == "TRUE"
    assert time.monotonic() - begun < scaled(5.0)  # woken, not timed out at timeout_sec
    assert out[0].header("ETag") == get(server, f"{BASE}/preempted").header("ETag")


def test_hanging_get_with_last_etag(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("gcp")
    false_etag = get(server, f"{BASE}/preempted").header("ETag")
    thread, out = in_thread(
        lambda: get(
            server, f"{BASE}/preempted?wait_for_change=true&last_etag={false_etag}&timeout_sec=30"
        )
    )
    assert notices.waiting.wait(scaled(5.0))
    notices.schedule_termination(T0, T0 + 30)
    thread.join(scaled(5.0))
    assert out and out[0].body == "TRUE"
    # A stale last_etag answers at once with the current value.
    begun = time.monotonic()
    reply = get(
        server, f"{BASE}/preempted?wait_for_change=true&last_etag={false_etag}&timeout_sec=30"
    )
    assert reply.body == "TRUE"
    assert time.monotonic() - begun < scaled(3.0)


def test_hanging_get_returns_the_current_value_at_timeout_sec(
    serve: Serve, notices: ObservedNotices
) -> None:
    server = serve("gcp")
    begun = time.monotonic()
    notices.recommend_rebalance()  # an unrelated change must not end the wait
    thread, out = in_thread(
        lambda: get(server, f"{BASE}/preempted?wait_for_change=true&timeout_sec=1")
    )
    assert notices.waiting.wait(scaled(5.0))
    notices.set_maintenance(MAINTENANCE_TERMINATE)  # wakes the waiter, but preempted did not change
    thread.join(scaled(5.0))
    elapsed = time.monotonic() - begun
    assert out and (out[0].status, out[0].body) == (200, "FALSE")
    assert 0.9 <= elapsed < 1.0 + scaled(2.0)
    # timeout_sec=0 answers at once.
    assert get(server, f"{BASE}/preempted?wait_for_change=true&timeout_sec=0").body == "FALSE"


def test_maintenance_event_and_its_hanging_get(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("gcp")
    assert get(server, f"{BASE}/maintenance-event").body == "NONE"
    thread, out = in_thread(
        lambda: get(server, f"{BASE}/maintenance-event?wait_for_change=true&timeout_sec=30")
    )
    assert notices.waiting.wait(scaled(5.0))
    notices.set_maintenance(MAINTENANCE_TERMINATE)
    thread.join(scaled(5.0))
    assert out and out[0].body == "TERMINATE_ON_HOST_MAINTENANCE"


@pytest.mark.parametrize(
    "query",
    [
        "wait_for_change=true&timeout_sec=abc",
        "wait_for_change=true&timeout_sec=-1",
        "wait_for_change=maybe",
    ],
)
def test_malformed_query_is_400(serve: Serve, query: str) -> None:
    server = serve("gcp")
    reply = get(server, f"{BASE}/preempted?{query}")
    assert reply.status == 400
    assert reply.header("Metadata-Flavor") == "Google"


def test_identity_items(serve: Serve) -> None:
    md = instance("gcp", instance_type="a2-highgpu-8g", zone="us-central1-a", project_id="proj-1")
    server = serve("gcp", metadata=md)
    assert get(server, f"{BASE}/id").body == "i-0123456789abcdef0"
    assert get(server, f"{BASE}/machine-type").body == "projects/proj-1/machineTypes/a2-highgpu-8g"
    assert get(server, f"{BASE}/zone").body == "projects/proj-1/zones/us-central1-a"
    assert get(server, f"{BASE}/scheduling/preemptible").body == "TRUE"
    ondemand = serve("gcp", spot=False)
    assert get(ondemand, f"{BASE}/scheduling/preemptible").body == "FALSE"
    assert "preempted" in get(server, f"{BASE}/").body.splitlines()


def test_on_demand_is_never_preempted(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("gcp", spot=False)
    notices.schedule_termination(T0, T0 + 30)
    assert get(server, f"{BASE}/preempted").body == "FALSE"


def test_unknown_path_and_method(serve: Serve) -> None:
    server = serve("gcp")
    reply = get(server, f"{BASE}/no-such-key")
    assert reply.status == 404
    assert reply.header("Metadata-Flavor") == "Google"
    assert get(server, "/computeMetadata/v2/instance/id").status == 404
    assert call(server.url, f"{BASE}/id", "PUT", FLAVOR, b"x").status == 405


def test_stopping_the_server_answers_a_hanging_get(serve: Serve, notices: ObservedNotices) -> None:
    server = serve("gcp")
    thread, out = in_thread(
        lambda: get(server, f"{BASE}/preempted?wait_for_change=true&timeout_sec=30")
    )
    assert notices.waiting.wait(scaled(5.0))
    server.stop()
    thread.join(scaled(5.0))
    assert out and (out[0].status, out[0].body) == (200, "FALSE")
