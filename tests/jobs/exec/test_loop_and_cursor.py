"""The loop runs a pass when poked (not at its period); the event cursor loses and repeats nothing."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.controlplane.store import StoreControlPlane
from spothop.jobs.controller.events import EventCursor
from spothop.jobs.controller.loop import Loop
from spothop.jobs.orphans import find_orphans
from spothop.jobs.store import JobStore
from spothop.state.wake import Waker, poke
from spothop.testing import make_instance
from spothop.wire.events import FinalNotice, WorkerExited
from tests.waiting import wait_for


def test_a_poke_runs_a_pass_long_before_the_period(spothop_home: Path) -> None:
    passes: list[float] = []
    with Waker() as waker:
        loop = Loop(lambda: passes.append(time.monotonic()), waker, period_s=3600)
        thread = threading.Thread(target=loop.run)
        thread.start()
        try:
            wait_for(lambda: len(passes) == 1, 10, what="the first pass")
            poke()
            wait_for(lambda: len(passes) == 2, 10, what="the pass a poke asked for")
            assert loop.stats.woken == 1
        finally:
            loop.stop()
            thread.join(10)
    assert not thread.is_alive()


def test_a_failing_pass_does_not_end_the_loop(spothop_home: Path) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        raise RuntimeError("the cloud is down")

    loop = Loop(step, None, period_s=0.01)
    thread = threading.Thread(target=loop.run)
    thread.start()
    wait_for(lambda: len(calls) >= 3, 10, what="passes after a failure")
    loop.stop()
    thread.join(10)
    assert loop.stats.failed_passes >= 3 and "cloud is down" in (loop.stats.last_error or "")


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[tuple[JobStore, StoreControlPlane]]:
    """A job store and instance i-1's control plane on one SQLite file."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    yield store, StoreControlPlane(url, "i-1")
    store.close()


def test_the_cursor_reads_each_event_once_and_again_after_an_uncommitted_pass(
    stored: tuple[JobStore, StoreControlPlane],
) -> None:
    store, plane = stored
    first = FinalNotice(instance_id="i-1", job_id="j-1", protocol="aws", cause="spot")
    plane.record(first)
    cursor = EventCursor(store)
    assert [e.event_id for e in cursor.read()] == [first.event_id]
    # The controller died before committing: a new one reads the same event again.
    assert [e.event_id for e in EventCursor(store).read()] == [first.event_id]
    cursor.commit()
    assert EventCursor(store).read() == []
    second = WorkerExited(instance_id="i-1", job_id="j-1", code=75)
    plane.record(second)
    again = EventCursor(store)
    assert [e.event_id for e in again.read()] == [second.event_id]
    again.commit()
    assert json.loads(store.cursor("agent_events") or "{}")["ids"]  # the overlap window's ids
    assert EventCursor(store).read() == []


def test_the_cursor_keeps_only_the_overlaps_ids_however_long_events_keep_coming(
    stored: tuple[JobStore, StoreControlPlane],
) -> None:
    from sqlalchemy import update

    from spothop.jobs.controller.events import CURSOR_OVERLAP_S
    from spothop.state.agent_tables import agent_events

    store, plane = stored
    step_s = CURSOR_OVERLAP_S / 4
    read: list[str] = []
    for n in range(12):  # an event every quarter of an overlap, a pass after each
        event = WorkerExited(instance_id="i-1", job_id="j-1", code=n)
        plane.record(event)
        with store.engine.begin() as conn:  # received as if n quarters of an overlap apart
            conn.execute(
                update(agent_events)
                .where(agent_events.c.event_id == event.event_id)
                .values(received_unix_s=1000.0 + n * step_s)
            )
        cursor = EventCursor(store)
        read += [e.event_id for e in cursor.read()]
        cursor.commit()
        window = json.loads(store.cursor("agent_events") or "{}")["ids"]
        assert len(window) <= 5, n  # the ids within one overlap of the newest, not all read
    assert len(read) == len(set(read)) == 12  # and still each event once


def test_a_cursor_stored_as_a_list_of_ids_still_reads(
    stored: tuple[JobStore, StoreControlPlane],
) -> None:
    store, plane = stored
    old = WorkerExited(instance_id="i-1", job_id="j-1", code=1)
    plane.record(old)
    store.set_cursor("agent_events", json.dumps({"t": 0.0, "ids": [old.event_id]}))
    new = WorkerExited(instance_id="i-1", job_id="j-1", code=2)
    plane.record(new)
    assert [e.event_id for e in EventCursor(store).read()] == [new.event_id]


def test_only_this_stores_unknown_instances_are_orphans(tmp_path: Path) -> None:
    from spothop.jobs.controller.observe import TAG_STORE, store_tag
    from spothop.providers.base import InstanceState

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    mine = {"spothop-job": "j-1", "spothop-token": "t-9", TAG_STORE: store_tag(url)}
    theirs = {**mine, TAG_STORE: store_tag("sqlite:///elsewhere.db")}
    instances = {
        "i-mine": make_instance(instance_id="i-mine", tags=mine, state=InstanceState.RUNNING),
        "i-theirs": make_instance(instance_id="i-theirs", tags=theirs, state=InstanceState.RUNNING),
    }
    assert [o.instance_id for o in find_orphans(store, url, instances)] == ["i-mine"]
    store.close()
