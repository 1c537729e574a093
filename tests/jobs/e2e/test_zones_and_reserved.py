"""Done when: a zone outage moves the work; a reserved pool is used before spot."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from tests.jobs.e2e.conftest import WORLD, Harness
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


def test_a_reserved_pool_is_filled_before_spot(harness: Harness) -> None:
    h = harness
    world = copy.deepcopy(WORLD)
    world["clouds"][0]["reserved"] = [
        {
            "instance_type": "g5.xlarge",
            "location": "us-east-1b",
            "count": 1,
            "price_usd_per_hour": 0.5,
        }
    ]
    h.set_world(world)
    spec = slow_batch(h, "reserved", workers=3)
    spec["reserved"] = [
        {"provider": "aws-sim", "instance_type": "g5.xlarge", "zone": "us-east-1b", "count": 1}
    ]
    job_id = h.launch(spec)
    wait_for(lambda: len(h.running(job_id)) == 3, 60, what="three workers running", interval_s=0.1)
    with h.store() as store:
        first = sorted(store.attempts(job_id), key=lambda a: a.launched_unix_s)[:3]
    kinds = Counter(str(a.market_kind) for a in first)
    assert kinds == {"reserved": 1, "spot": 2}, kinds  # the pool as the base, spot on top
    (pool,) = [a for a in first if str(a.market_kind) == "reserved"]
    assert (pool.provider, pool.zone, pool.instance_type) == ("aws-sim", "us-east-1b", "g5.xlarge")
    (instance,) = [i for i in h.running(job_id) if i.instance_id == pool.instance_id]
    assert not instance.spot
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 120, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    check_exactly_once(h, job_id, h.tmp / "out-reserved", shards=SHARDS)
