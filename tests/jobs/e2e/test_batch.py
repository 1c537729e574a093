"""Done when: a batch job of 4 workers over 2,000 shards survives ≥ 5 preemptions, 0 lost, 0 duplicated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spothop.queue import open_queue
from spothop.queue.outputs import OutputStore
from tests.jobs.e2e.conftest import HERE, Harness, script_job
from tests.waiting import wait_for

SHARDS = 2000
PREEMPTIONS = 5
# Simulated seconds from each notice to the reclaim: 6 s of wall time at the harness's speed for a
# worker to finish its shard and give its leases back (the default 60, 12 s, kept the last
# noticed worker alive that long after the job ended).
LEAD_S = 30.0


def batch_spec(tmp: Path, name: str = "embed", shards: int = SHARDS) -> dict[str, Any]:
    data = tmp / f"data-{name}"
    data.mkdir()
    with open(data / "records.jsonl", "w") as handle:
        for i in range(shards):
            handle.write(json.dumps({"i": i}) + "\n")
    return {
        "name": name,
        "kind": "batch",
        "workers": 4,
        "market": "spot",
        "tolerance": "aggressive",
        **script_job(HERE / "batch_worker.py", tmp / f"out-{name}"),
        "batch": {
            "inputs": [str(data / "*.jsonl")],
            "records_per_shard": 1,
            "output": str(tmp / f"out-{name}"),
        },
    }


def check_exactly_once(
    h: Harness, job_id: str, output: Path, queue_url: str | None = None, shards: int = SHARDS
) -> None:
    with open_queue(queue_url or h.queue_url, job_id) as queue:
        stats = queue.stats()
    assert (stats.done, stats.pending, stats.leased, stats.dead) == (shards, 0, 0, 0)
    store = OutputStore(str(output))
    published = store.published()
    assert len(published) == shards  # 0 lost
    firsts = sorted(json.loads(store.read(s))["first"] for s in published)
    assert firsts == list(range(shards))  # every record once: 0 duplicated
    assert store.temporaries() == []  # no loser's output left behind


def preempt_workers(h: Harness, job_id: str, count: int) -> list[str]:
    """Preempt ``count`` running workers, one at a time, each after its replacement's shards move."""
    preempted: list[str] = []
    while len(preempted) < count:

        def victim() -> Any:
            running = [i for i in h.running(job_id) if i.instance_id not in preempted]
            return running[0] if running else None

        instance = wait_for(victim, 60, what="a running worker to preempt", interval_s=0.1)
        h.preempt(instance, lead_time_s=LEAD_S)
        preempted.append(instance.instance_id)
    return preempted


def run_batch_with_preemptions(h: Harness) -> None:
    """The Done-when batch scenario on whatever store and queue ``h`` is set up with."""
    spec = batch_spec(h.tmp)
    job_id = h.launch(spec)
    wait_for(lambda: len(h.running(job_id)) >= 2, 60, what="workers running", interval_s=0.1)
    preempt_workers(h, job_id, PREEMPTIONS)
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 120, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    assert final["interruptions"] >= PREEMPTIONS
    assert final["progress"]["shards_done"] == final["progress"]["shards_total"] == SHARDS
    check_exactly_once(h, job_id, h.tmp / "out-embed")
    wait_for(lambda: not h.alive(job_id), 30, what="every worker released")


def test_batch_job_survives_preemptions_with_every_shard_once(harness: Harness) -> None:
    run_batch_with_preemptions(harness)
