"""The dashboard's HTTP app over a real store: JSON endpoints, the event stream, /metrics, plotly served."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spothop.dashboard.app import Dashboard
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[JobStore, str, Dashboard]]:
    store = JobStore(f"sqlite:///{tmp_path / 'store.db'}")
    app = Dashboard(store)
    _server, base = app.start()
    try:
        yield store, base, app
    finally:
        app.stop()


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read(), r.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def get_json(url: str) -> Any:
    status, body, _ = get(url)
    assert status == 200, body
    return json.loads(body)


def a_job_with_a_preemption(store: JobStore) -> str:
    job_id = store.create_job(load_job({"name": "shown", "run": "sleep 600"}))
    a = store.add_attempt(
        job_id,
        0,
        provider="p1",
        region="r1",
        zone="r1a",
        instance_type="t1",
        market_kind="spot",
        price_usd_per_hour=0.5,
    )
    store.update_attempt(a.attempt_id, state=AttemptState.RUNNING, instance_id="i-1")
    store.update_attempt(a.attempt_id, state=AttemptState.NOTICED)
    store.update_attempt(a.attempt_id, state=AttemptState.ENDED, end_reason=EndReason.PREEMPTED)
    b = store.add_attempt(
        job_id,
        0,
        provider="p2",
        region="r2",
        zone="r2a",
        instance_type="t2",
        market_kind="spot",
        price_usd_per_hour=0.7,
    )
    store.update_attempt(b.attempt_id, state=AttemptState.RUNNING, instance_id="i-2")
    return job_id


def test_endpoints(served: tuple[JobStore, str, Dashboard]) -> None:
    store, base, _ = served
    job_id = a_job_with_a_preemption(store)
    status, page, kind = get(base + "/")
    assert status == 200 and b"static/plotly.min.js" in page and kind.startswith("text/html")
    status, js, _ = get(base + "/static/plotly.min.js")
    assert status == 200 and len(js) > 1_000_000  # the whole library, from the plotly package
    (job,) = get_json(base + "/api/jobs")
    assert job["job_id"] == job_id and job["preemptions"] == 1 and job["attempts"] == 2
    assert [i["provider"] for i in job["instances"]] == ["p2"]
    tl = get_json(f"{base}/api/timeline?job={job_id}")
    assert [b["provider"] for b in tl["bars"]] == ["p1", "p2"]
    assert [b["preempted"] for b in tl["bars"]] == [True, False]
    (m1, m2) = sorted(get_json(base + "/api/markets"), key=lambda m: m["provider"])
    assert m1["preemptions"] == 1 and m2["preemptions"] == 0
    cost = get_json(base + "/api/cost")
    assert cost["cost_usd"] and cost["missing"]  # no catalog here: on-demand missing, listed
    events = get_json(base + "/api/events")
    assert any(e["kind"] == "attempt_ended" for e in events)
    status, body, kind = get(base + "/metrics")
    families = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"spothop_instances", "spothop_preemptions", "spothop_spend_usd_per_hour"} <= families


def test_unknown_job_names_the_nearest(served: tuple[JobStore, str, Dashboard]) -> None:
    store, base, _ = served
    job_id = a_job_with_a_preemption(store)
    status, body, _ = get(f"{base}/api/timeline?job={job_id[:-1]}x")
    assert status == 404
    answer = json.loads(body)
    assert "no job" in answer["error"] and job_id in answer["nearest"]
    status, body, _ = get(f"{base}/api/nothing")
    assert status == 404
    status, body, _ = get(f"{base}/api/events?after=soon")
    assert status == 400 and "after" in json.loads(body)["error"]


def test_stream_sends_new_events(served: tuple[JobStore, str, Dashboard]) -> None:
    store, base, _ = served
    job_id = a_job_with_a_preemption(store)
    with urllib.request.urlopen(base + "/api/stream?after=1", timeout=10) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        kinds = []
        while len(kinds) < 3:
            line = r.readline().decode()
            if line.startswith("data: {"):
                event = json.loads(line.removeprefix("data: "))
                assert event["job_id"] == job_id and event["seq"] > 1
                kinds.append(event["kind"])
    assert "attempt_launching" in kinds or "attempt_running" in kinds
