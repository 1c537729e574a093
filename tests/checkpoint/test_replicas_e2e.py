"""End to end on the local cloud: a preempted training task's next instance restores from the
replica of its own region, and ``spothop report`` shows which replica served it.

Real processes: the controller daemon, local-cloud instances, their agents and the worker
(``replica_train.py``), on the e2e harness's world (aws-sim in us-east-1, gcp-sim in
us-central1, speed 5). The preemption is injected once the replicas hold a durable save.
"""

from __future__ import annotations

import shutil
from typing import Any

from spothop.checkpoint.replicas import read_restore_records
from tests.checkpoint import replica_train
from tests.jobs.e2e import numpy_train
from tests.jobs.e2e.conftest import Harness, harness, script_job  # noqa: F401 - the e2e harness fixture
from tests.jobs.e2e.test_training import newest_step
from tests.waiting import wait_for

TOTAL = 150
STEP_SLEEP_S = 0.03
# Simulated seconds from the notice to the reclaim (4 s of wall time at speed 5): the restore is
# from the durable save both replicas hold before the notice; at 60 (12 s) the test mostly waited
# for the noticed instance's reclaim after the job had ended.
LEAD_S = 20.0


def test_the_next_instance_restores_from_its_own_regions_replica(
    harness: Harness,  # noqa: F811 - the fixture imported above
) -> None:
    h = harness
    replicas = {
        "aws-sim/us-east-1": str(h.tmp / "replica-us-east-1"),
        "gcp-sim/us-central1": str(h.tmp / "replica-us-central1"),
    }
    out = h.tmp / "final.bin"
    # The job's workdir: the script and the loop it imports, side by side (an instance has
    # only what the workdir uploads; the script finds numpy_train beside itself).
    code = h.tmp / "code"
    code.mkdir()
    for module in (replica_train, numpy_train):
        shutil.copy(str(module.__file__), code)
    spec: dict[str, Any] = {
        "name": "train-near",
        "market": "spot",
        "tolerance": "aggressive",
        "zones": ["us-central1-a", "us-east-1a"],
        "checkpoint": {"url": str(h.tmp / "ckpt"), "replicas": replicas},
        **script_job(code / "replica_train.py", TOTAL, out, "--step-sleep", STEP_SLEEP_S),
    }
    job_id = h.launch(spec)

    def training(exclude: set[str]) -> Any:
        for i in h.running(job_id):
            control = h.agent_dir(i) / "control"
            if i.instance_id not in exclude and (control / "stop-callback").exists():
                return i
        return None

    first = wait_for(lambda: training(set()), 60, what="the task training")
    wait_for(
        lambda: all(newest_step(url) >= replica_train.EVERY for url in replicas.values()),
        60,
        what="a durable save copied to both replicas",
    )
    h.preempt(first, lead_time_s=LEAD_S)
    second = wait_for(lambda: training({first.instance_id}), 60, what="the task on a new instance")
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 90, what="the task to end")
    assert final["state"] == "succeeded", final["reason"]
    assert out.read_bytes() == numpy_train.train(TOTAL).tobytes()

    (record,) = read_restore_records(str(h.tmp / "ckpt"))  # the first instance had nothing
    own = f"{second.provider}/{second.region}"
    assert (record.provider, record.region) == (second.provider, second.region)
    assert record.own_replica == own
    assert record.served_by == own and record.from_own_region
    assert record.step >= replica_train.EVERY and record.seconds > 0

    code, text = h.cli("report", job_id, "--store", h.store_url)
    assert code == 0, text
    assert "restores" in text and own in text
    wait_for(lambda: not h.alive(job_id), 30, what="the task's instances to end")
