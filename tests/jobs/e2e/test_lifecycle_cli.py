"""The job CLI end to end: launch follows a job to its end (exit 0 done, 1 failed), logs, cancel."""

from __future__ import annotations

import json

import yaml

from tests.jobs.e2e.conftest import Harness
from tests.waiting import wait_for


def test_launch_follows_a_job_to_success_and_a_failing_worker_to_failure(harness: Harness) -> None:
    h = harness
    ok = h.tmp / "ok.yaml"
    ok.write_text(yaml.safe_dump({"name": "hello", "run": "echo hello from the worker"}))
    code, out = h.cli("launch", str(ok), "--json", *h.launch_args())
    assert code == 0, out
    done = json.loads(out)
    assert done["state"] == "succeeded"
    assert [i["exit_code"] for i in done["instances"]] == [0]
    code, text = h.cli("logs", done["job_id"], "--store", h.store_url)
    assert code == 0 and "hello from the worker" in text
    bad = h.tmp / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "broken", "run": "echo oops; exit 3", "max_retries": 1}))
    code, out = h.cli("launch", str(bad), "--json", *h.launch_args())
    assert code == 1, out
    failed = json.loads(out)
    assert failed["state"] == "failed" and "max_retries" in failed["reason"]
    assert len(failed["instances"]) == 2  # one retry, then FAILED


def test_cancel_terminates_the_instances_and_cancels_the_job(harness: Harness) -> None:
    h = harness
    job_id = h.launch({"name": "forever", "run": "sleep 600"})
    wait_for(lambda: h.running(job_id), 60, what="the job running", interval_s=0.1)
    code, out = h.cli("cancel", job_id, "--json", "--store", h.store_url)
    assert code == 0 and json.loads(out)["cancel_requested"]
    final = h.wait_state(job_id, {"cancelled"}, 60, what="the job cancelled")
    assert final["reason"]
    wait_for(lambda: not h.alive(job_id), 30, what="its instance terminated")
    code, _ = h.cli("cancel", job_id, "--store", h.store_url)
    assert code == 1  # already cancelled: nothing to cancel
