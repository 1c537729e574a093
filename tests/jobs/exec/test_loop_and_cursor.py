"""The loop runs a pass when poked (not at its period); the event cursor loses and repeats nothing."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from spothop.agent.controlplane.store import StoreControlPlane
from spothop.agent.eventmodel import FinalNotice, WorkerExited
from spothop.jobs.controller.loop import Loop
from spothop.jobs.controller.observe import EventCursor
from spothop.jobs.orphans import find_orphans
from spothop.jobs.store import JobStore
from spothop.state.wake import Waker, poke
from spothop.testing import make_instance
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


def test_the_cursor_reads_each_event_once_and_again_after_an_uncommitted_pass(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    plane = StoreControlPlane(url, "i-1")
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
    store.close()


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
