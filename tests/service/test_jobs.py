"""spothop.service.jobs: a job's status, the job list and a cancel, as both fronts answer them."""

from __future__ import annotations

import json

import pytest

from spothop.jobs.errors import JobFinished, JobNotFound
from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.service.jobs import (
    CANCEL_EVENT,
    JobQuery,
    job_status,
    job_storage,
    list_jobs,
    request_cancel,
)
from tests.service.conftest import preempted_job

STATUS_KEYS = [
    "job_id",
    "name",
    "kind",
    "state",
    "reason",
    "interruptions",
    "on_demand_forced",
    "created_unix_s",
    "updated_unix_s",
    "nodes",
    "instances",
    "launch_failures",
    "spend_usd",
    "queue",
    "progress",
    "events",
]


def test_a_status_answers_its_keys_in_the_order_status_json_prints_them(store: JobStore) -> None:
    job_id = preempted_job(store)
    data = job_status(store, job_id).to_dict()
    assert list(data) == STATUS_KEYS
    assert data["interruptions"] == 1 and data["queue"] is None
    assert data["spend_usd"] == pytest.approx(0.5 * 3000 / 3600, abs=1e-6)
    (instance,) = data["instances"]
    assert instance["instance_id"] == "i-1" and instance["end_reason"] == "preempted"
    assert instance["market"] == "spot" and data["progress"] == {"step": None}
    json.dumps(data)  # JSON as it is


def test_a_status_without_events_leaves_the_key_out(store: JobStore) -> None:
    job_id = preempted_job(store)
    assert "events" not in job_status(store, job_id, events=False).to_dict()


def test_an_unknown_job_has_no_status(store: JobStore) -> None:
    with pytest.raises(JobNotFound):
        job_status(store, "j-nope")


def test_the_list_keeps_the_states_the_jobs_and_the_newest_asked(store: JobStore) -> None:
    ids = [store.create_job(load_job({"name": f"n{i}", "run": "true"})) for i in range(3)]
    assert [j["job_id"] for j in list_jobs(store).to_list()] == ids
    assert list_jobs(store, JobQuery(newest=2)).to_dict() == {
        "jobs": [r.to_dict() for r in store.list_jobs()[1:]]
    }
    kept = list_jobs(store, JobQuery(job_ids={ids[0], ids[2]}, newest=1))
    assert [j.job_id for j in kept.jobs] == [ids[2]]
    assert list_jobs(store, JobQuery(states=("running",))).jobs == ()


def test_a_cancel_is_an_event_the_controller_acts_on(store: JobStore) -> None:
    job_id = preempted_job(store)
    assert request_cancel(store, job_id, by="user ann").to_dict() == {
        "job_id": job_id,
        "cancel_requested": True,
    }
    (event,) = [e for e in store.events(job_id) if e.kind == CANCEL_EVENT]
    assert event.data == {"by": "user ann"}


def test_a_finished_job_cannot_be_cancelled(store: JobStore) -> None:
    job_id = preempted_job(store)
    store.transition(job_id, JobState.CANCELLED, "cancelled")
    with pytest.raises(JobFinished, match="nothing to cancel"):
        request_cancel(store, job_id)


def test_a_job_without_checkpoints_or_outputs_says_so(store: JobStore) -> None:
    job_id = preempted_job(store)
    assert job_storage(store, job_id).to_dict() == {
        "job_id": job_id,
        "checkpoint_url": None,
        "output_url": None,
    }
