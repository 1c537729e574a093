"""The report over a real store reads only the events it uses: thousands of others change nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from spothop.controlplane.store import StoreControlPlane
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.observe import events as stream_module
from spothop.observe import job_report as report_module
from spothop.observe.events import EventStream
from spothop.observe.report import REPORT_KINDS
from spothop.service.report import job_report
from spothop.wire.events import (
    FinalNotice,
    Interruption,
    Probe,
    WorkerStarted,
    event_from_dict,
    new_event_id,
)

PLACE = {"provider": "p1", "region": "r1", "zone": "z1", "instance_type": "t1"}
PROBES = 600  # a bench minute's worth for a few agents; enough that reading them shows


def _job(store: JobStore, url: str) -> str:
    """A task job whose one attempt was preempted (notice, interruption, outputs published)."""
    job_id = store.create_job(load_job({"name": "report-events", "run": "true"}))
    attempt = store.add_attempt(job_id, 0, **PLACE, market_kind="spot", price_usd_per_hour=0.5)
    store.update_attempt(
        attempt.attempt_id, instance_id="i-1", state=AttemptState.RUNNING, running_unix_s=1000.0
    )
    store.update_attempt(attempt.attempt_id, state=AttemptState.NOTICED, noticed_unix_s=4000.0)
    store.update_attempt(
        attempt.attempt_id,
        state=AttemptState.ENDED,
        end_reason=EndReason.PREEMPTED,
        ended_unix_s=4030.0,
    )
    plane = StoreControlPlane(url, "i-1")
    stamp = {**PLACE, "instance_id": "i-1", "job_id": job_id}
    plane.record(FinalNotice(**stamp, cause="capacity", lead_time_s=30.0))
    plane.record(
        Interruption(
            **stamp, notice_time_unix_s=time.time(), cause="capacity", lead_time_s=30.0,
            saved="saved", steps_s={"save": 1.5},
        )
    )  # fmt: skip
    store.record_event(job_id, "outputs_published", {"url": "file:///out", "files": 3})
    return job_id


def _noise(url: str, job_id: str, count: int) -> None:
    """What a job's agents send besides: probes from many instances, the attempt's own
    worker start, and an event of a kind this code does not know."""
    plane = StoreControlPlane(url, "bench-0000")
    plane.record_many(
        [
            Probe(instance_id=f"bench-{i % 50:04d}", job_id=job_id, ran=False, reason="bench")
            for i in range(count)
        ]
        + [
            WorkerStarted(instance_id="i-1", pid=42),
            event_from_dict(
                {"event_id": new_event_id(), "kind": "gpu_throttled", "instance_id": "i-1"}
            ),
        ]
    )


def test_many_irrelevant_agent_events_leave_the_report_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        job_id = _job(store, url)
        before = job_report(store, job_id, {}).to_dict()
        _noise(url, job_id, PROBES)
        after = job_report(store, job_id, {}).to_dict()
        monkeypatch.setattr(report_module, "REPORT_KINDS", None)  # the whole stream, as it was read
        whole = job_report(store, job_id, {}).to_dict()
    assert after == before == whole
    assert after["interruption_count"] == 1 and after["interruptions"][0]["save_s"] == 1.5
    assert after["outputs"] == {"url": "file:///out", "files": 3}


def test_the_reports_query_leaves_the_other_kinds_in_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    parsed: list[str] = []
    real = stream_module._from_agent_row

    def counting(payload: str, by_instance: Any) -> Any:
        parsed.append(payload)
        return real(payload, by_instance)

    monkeypatch.setattr(stream_module, "_from_agent_row", counting)
    with JobStore(url) as store:
        job_id = _job(store, url)
        _noise(url, job_id, PROBES)
        statements: list[tuple[str, Any]] = []

        def seen(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
            if "FROM agent_events" in statement:
                statements.append((statement, params))

        event.listen(store.engine, "before_cursor_execute", seen)
        try:
            events, _ = EventStream(store).read(job_id, kinds=REPORT_KINDS)
        finally:
            event.remove(store.engine, "before_cursor_execute", seen)
        parsed_for_report = list(parsed)
        everything, _ = EventStream(store).read(job_id)
    # Parsed: the notice, the interruption, and the row of the kind this code does not know (its
    # kind column is "": only its payload says what it is); the probes and the worker's start
    # never left the database.
    assert len(parsed_for_report) == 3
    assert not [p for p in parsed_for_report if '"probe"' in p or '"worker_started"' in p]
    assert sum(e.kind == "probe" for e in everything) == PROBES  # they are in the stream
    assert sorted(e.kind for e in events) == ["final_notice", "interruption", "outputs_published"]
    assert len(statements) == 1 and "agent_events.kind IN" in statements[0][0]
    assert "probe" not in str(statements[0][1])


def test_an_event_stored_as_unknown_is_judged_by_the_kind_in_its_payload(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "report-events", "run": "true"}))
        newer = {
            "event_id": new_event_id(), "kind": "interruption", "schema_version": 99,
            "instance_id": "i-9", "job_id": job_id, "cause": "capacity",
        }  # fmt: skip
        StoreControlPlane(url, "i-9").record(event_from_dict(newer))
        events, _ = EventStream(store).read(job_id, kinds=REPORT_KINDS)
        everything, _ = EventStream(store).read(job_id)
    assert [e.kind for e in events] == ["interruption"]
    assert [e for e in everything if e.source == "agent"] == events
