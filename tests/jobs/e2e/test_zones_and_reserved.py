"""Done when: a zone outage moves the work. (A reserved pool used before spot, with real
processes: tests/jobs/e2e/test_world_pools.py; a spec's ``reserved`` narrowing the pools:
tests/jobs/reserved/test_reserved_pools.py.)"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.jobs.e2e.conftest import Harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.waiting import wait_for

SHARDS = 400


def slow_batch(h: Harness, name: str, workers: int) -> dict[str, Any]:
    spec = batch_spec(h.tmp, name, shards=SHARDS)
    spec["workers"] = workers
    spec["envs"] = {"WORK_S_PER_SHARD": "0.05"}  # long enough to lose a zone mid-job
    return spec


def test_a_zone_outage_moves_the_work_to_other_zones(harness: Harness) -> None:
    h = harness
    spec = slow_batch(h, "outage", workers=4)
    spec["zones"] = ["us-east-1a", "us-east-1b", "us-central1-a"]
    job_id = h.launch(spec)
    wait_for(lambda: len(h.running(job_id)) == 4, 60, what="four workers running", interval_s=0.1)
    by_zone = Counter(i.zone for i in h.running(job_id))
    zone, count = by_zone.most_common(1)[0]
    assert count >= 2, by_zone  # four workers in three zones: one holds two
    lost = [i for i in h.running(job_id) if i.zone == zone]
    for instance in lost:  # the whole zone at once
        h.preempt(instance, lead_time_s=10)
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 120, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    lost_ids = {i.instance_id for i in lost}
    with h.store() as store:
        attempts = store.attempts(job_id)
        cooled = store.cooldowns()
    lost_attempts = [a for a in attempts if a.instance_id in lost_ids]
    # Every later attempt of a node that lost its instance in the outage: its replacements.
    replacements = [
        a
        for a in attempts
        for gone in lost_attempts
        if a.node == gone.node and a.launched_unix_s > gone.launched_unix_s
    ]
    assert replacements
    assert all(a.zone != zone for a in replacements)  # the work moved out of the lost zone
    assert any(m.zone == zone and m.instance_type == "" for m in cooled)  # the zone itself cooled
    check_exactly_once(h, job_id, h.tmp / "out-outage", shards=SHARDS)
