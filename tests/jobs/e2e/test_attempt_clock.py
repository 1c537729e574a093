"""Attempt times are on the provider's clock (what bills): the local cloud's runs 5× the wall, so
an attempt stamped with the wall would end before the cloud's "now" at which it was seen running."""

from __future__ import annotations

from tests.jobs.e2e.conftest import Harness
from tests.waiting import wait_for


def test_every_attempt_time_is_on_the_providers_clock(harness: Harness) -> None:
    h = harness
    job_id = h.launch({"name": "clock", "market": "spot", "run": "sleep 2"})
    (instance,) = wait_for(lambda: h.running(job_id), 60, what="the task running")
    provider = h.providers[instance.provider]
    seen_running = provider.clock.now()
    final = h.wait_state(job_id, {"succeeded", "failed"}, 60, what="the task to end")
    assert final["state"] == "succeeded", final["reason"]
    with h.store() as store:
        attempts = store.attempts(job_id)
    # One attempt on a calm market; should another appear, say why it was made.
    assert len(attempts) == 1, [
        (a.attempt_id, a.provider, a.end_reason, a.error_code, a.error_message, a.launched_unix_s)
        for a in attempts
    ]
    (attempt,) = attempts
    cloud = provider.describe(instance.instance_id)
    assert attempt.running_unix_s is not None and attempt.ended_unix_s is not None
    # Read before the launch call, on the clock the cloud stamped its launch with.
    assert attempt.launched_unix_s <= cloud.launched_at
    assert cloud.running_at is not None and attempt.running_unix_s >= cloud.running_at
    # The worker ran 2 s of wall (10 s of the cloud) after the test saw it running.
    assert seen_running <= attempt.ended_unix_s <= provider.clock.now()
