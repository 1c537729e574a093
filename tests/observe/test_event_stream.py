"""The event stream over a real store: both sources in time order, each event once through a cursor."""

from __future__ import annotations

import time
from pathlib import Path

from spothop.controlplane.store import StoreControlPlane
from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.observe.events import Cursor, EventStream, StreamEvent
from spothop.wire.events import FinalNotice, Interruption, WorkerStarted


def test_both_sources_arrive_in_order_and_a_cursor_reads_each_event_once(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "stream", "run": "true"}))
        attempt = store.add_attempt(
            job_id, 0, provider="p1", region="r1", zone="z1", instance_type="t1",
            market_kind="spot", price_usd_per_hour=0.5,
        )  # fmt: skip
        store.update_attempt(attempt.attempt_id, instance_id="i-1", state=AttemptState.PENDING)
        plane = StoreControlPlane(url, "i-1")
        # The agent was not told its job: its instance, which an attempt owns, places it.
        plane.record(WorkerStarted(instance_id="i-1"))
        stream = EventStream(store)
        first, cursor = stream.read(job_id)
        kinds = [(e.source, e.kind) for e in first]
        assert ("agent", "worker_started") in kinds and ("controller", "created") in kinds
        started = next(e for e in first if e.kind == "worker_started")
        assert (started.job_id, started.provider, started.zone) == (job_id, "p1", "z1")

        plane.record(
            FinalNotice(instance_id="i-1", job_id=job_id, cause="capacity", lead_time_s=30.0)
        )
        plane.record(
            Interruption(
                instance_id="i-1", job_id=job_id, provider="p1", region="r1", zone="z1",
                instance_type="t1", notice_time_unix_s=time.time(), cause="capacity", lead_time_s=30.0,
                saved="saved", steps_s={"save": 1.5}, leases_released=3,
            )
        )  # fmt: skip
        store.record_event(job_id, "note", {"attempt_id": attempt.attempt_id})
        second, cursor = stream.read(job_id, cursor)
        assert sorted(e.kind for e in second) == ["final_notice", "interruption", "note"]
        interruption = next(e for e in second if e.kind == "interruption")
        assert (interruption.lead_time_s, interruption.save_s) == (30.0, 1.5)
        assert interruption.recomputed_shards == 3 and interruption.cause == "capacity"
        assert next(e for e in second if e.kind == "note").instance_id == "i-1"
        assert [e.time_unix_s for e in first] == sorted(e.time_unix_s for e in first)
        assert stream.read(job_id, cursor)[0] == []


def test_pages_of_a_limit_give_every_event_once_even_those_received_together(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "pages", "run": "true"}))
        plane = StoreControlPlane(url, "i-1")
        # One batch: one received time for all 25, so pages end inside a tie.
        plane.record_many(
            [WorkerStarted(instance_id="i-1", job_id=job_id, pid=i) for i in range(25)]
        )
        for i in range(3):
            store.record_event(job_id, "note", {"i": i})
        stream = EventStream(store)
        whole, _ = stream.read(job_id)

        def pages(cursor: Cursor | None) -> tuple[list[StreamEvent], Cursor | None]:
            seen: list[StreamEvent] = []
            for _ in range(20):  # a bound: 29 events at 7 a page
                page, cursor = stream.read(job_id, cursor, limit=7)
                assert len(page) <= 7
                if not page:
                    return seen, cursor
                seen += page
            raise AssertionError("the pages never ended")

        paged, cursor = pages(None)
        assert sorted(map(repr, paged)) == sorted(map(repr, whole))
        plane.record(FinalNotice(instance_id="i-1", job_id=job_id, lead_time_s=30.0))
        later, _ = pages(cursor)
        assert [e.kind for e in later] == ["final_notice"]
