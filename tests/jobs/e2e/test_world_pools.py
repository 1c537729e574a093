"""Done when: a reserved pool is used before spot — here the world's own pool, which no spec names.

The pools a user owns count as reserved capacity whether or not the job file
lists them (docs/controller.md, "Reserved capacity"): the controller reads them
from the provider and fills them first. Real processes, as in ``test_batch.py``.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from tests.jobs.e2e.conftest import WORLD, Harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.waiting import wait_for

SHARDS = 300
POOL = {
    "instance_type": "g5.xlarge",
    "location": "us-east-1a",
    "count": 1,
    "price_usd_per_hour": 0.4,
}


def test_the_worlds_own_pool_is_the_base_and_spot_carries_the_rest(harness: Harness) -> None:
    h = harness
    world = copy.deepcopy(WORLD)
    world["clouds"][0]["reserved"] = [POOL]
    h.set_world(world)
    spec = batch_spec(h.tmp, "pooled", shards=SHARDS)
    spec["workers"] = 3
    spec["envs"] = {"WORK_S_PER_SHARD": "0.1"}  # the queue outlasts the workers' boot
    assert "reserved" not in spec
    job_id = h.launch(spec)

    def every_node_launched() -> list[Any] | None:
        found = h.store().attempts(job_id)
        return found if len({a.node for a in found}) >= 3 else None

    attempts = wait_for(every_node_launched, 60, what="a launch for each worker", interval_s=0.1)
    first = sorted(attempts, key=lambda a: a.launched_unix_s)[:3]
    kinds = Counter(str(a.market_kind) for a in first)
    assert kinds == {"reserved": 1, "spot": 2}, kinds  # the pool holds one: spot for the rest
    (pooled,) = [a for a in first if str(a.market_kind) == "reserved"]
    assert (pooled.provider, pooled.zone, pooled.instance_type) == (
        "aws-sim",
        "us-east-1a",
        "g5.xlarge",
    )
    instance = wait_for(
        lambda: next((i for i in h.alive(job_id) if i.reservation), None),
        60,
        what="the pooled worker's instance",
    )
    assert (instance.spot, instance.market, instance.reservation) == (
        False,
        "reserved",
        "us-east-1a/g5.xlarge",
    )
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 120, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    assert {i["market"] for i in final["instances"]} == {"reserved", "spot"}, final["instances"]
    check_exactly_once(h, job_id, h.tmp / "out-pooled", shards=SHARDS)
