"""One job whose stored spec cannot be read fails with the reason; the controller's pass goes on
for every other job."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from spothop.jobs.controller.loop import Controller
from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.waiting import wait_for


def test_one_unreadable_job_fails_alone_and_the_others_are_placed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    provider = FakeProvider(markets=[make_market(o) for o in make_offerings()], clock=ManualClock())
    controller = Controller(store, {provider.name: provider}, store_url=url, home=tmp_path)
    try:
        broken = store.create_job(load_job({"name": "broken", "run": "true"}))
        good = store.create_job(load_job({"name": "good", "run": "true"}))
        with store._engine.begin() as conn:  # the damage: written past the store's API
            conn.execute(
                text("UPDATE jobs SET spec_json = :bad WHERE job_id = :id"),
                {"bad": '{"name": "broken", "run": ', "id": broken},
            )
        controller.run_pass()
        failed = store.get_job(broken)
        assert failed.state is JobState.FAILED
        assert failed.reason and "its stored spec cannot be read" in failed.reason
        # The other job was placed in the same pass: its launch (and the attempt it writes
        # before the cloud call) runs on the executor's launch thread, so wait for the attempt.
        wait_for(lambda: store.attempts(good), 10, what="the other job's attempt")
        controller.run_pass()  # and the next pass too
        assert store.get_job(broken).state is JobState.FAILED
    finally:
        controller.close()
        store.close()
