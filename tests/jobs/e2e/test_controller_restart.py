"""Done when: the controller SIGKILLed twice mid-job and restarted: both jobs succeed, no instance
leaked, no event lost.

A batch job and a checkpointed task run at once. The controller is SIGKILLed
(no chance to clean up), and while it is dead a worker of each job is
preempted, so the agents' events land in the store with nobody reading them.
The restarted controller adopts the instances it knows, reads the events it
missed from its cursor, and replaces the preempted workers. Twice.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sqlalchemy import select

from spothop.jobs.controller import daemon
from spothop.state.agent_tables import agent_events
from tests.jobs.e2e import numpy_train
from tests.jobs.e2e.conftest import Harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.waiting import wait_for

SHARDS = 600
WORK_S_PER_SHARD = 0.1
TOTAL = 600
STEP_SLEEP_S = 0.02


def test_two_sigkills_lose_no_job_no_instance_and_no_event(harness: Harness) -> None:
    h = harness
    spec = batch_spec(h.tmp, "restart", shards=SHARDS)
    spec["envs"] = {"WORK_S_PER_SHARD": str(WORK_S_PER_SHARD)}  # the job outlasts two rounds
    batch_id = h.launch(spec, "batch.yaml")
    out = h.tmp / "final.bin"
    task_id = h.launch(
        {
            "name": "task",
            "market": "spot",
            "tolerance": "aggressive",
            "checkpoint": {"url": str(h.tmp / "ckpt")},
            "run": f"{sys.executable} {numpy_train.__file__} {TOTAL} {out} --step-sleep {STEP_SLEEP_S}",
        },
        "task.yaml",
    )
    killed: list[int] = []
    preempted: list[str] = []
    for _ in range(2):
        for job_id in (batch_id, task_id):
            wait_for(lambda j=job_id: h.running(j), 60, what=f"{job_id} running", interval_s=0.1)
        killed.append(h.kill_controller())
        # While no controller runs: one worker of each job preempted; the agents record it.
        for job_id in (batch_id, task_id):
            instance = h.running(job_id)[0]
            h.preempt(instance)
            preempted.append(instance.instance_id)
        wait_for(
            lambda: len(stored_events(h, "interruption")) >= len(preempted),
            60,
            what="the agents' interruption records",
        )
        info = h.start_controller()
        assert info.pid not in killed
    for job_id in (batch_id, task_id):
        final = h.wait_state(
            job_id, {"succeeded", "failed", "cancelled"}, 120, what=f"{job_id} to end"
        )
        assert final["state"] == "succeeded", final["reason"]
        assert final["interruptions"] >= 2
    check_exactly_once(h, batch_id, h.tmp / "out-restart", shards=SHARDS)
    assert out.read_bytes() == numpy_train.train(TOTAL).tobytes()
    # No event lost: every preempted instance's attempt ended as preempted.
    with h.store() as store:
        attempts = {a.instance_id: a for j in (batch_id, task_id) for a in store.attempts(j)}
        cursor = store.cursor("agent_events")
    assert all(str(attempts[i].end_reason) in ("preempted", "superseded") for i in preempted)
    newest = max(e["received_unix_s"] for e in stored_events(h, None))
    assert cursor is not None and json.loads(cursor)["t"] >= newest - 30
    # No instance leaked: none alive, and every instance the cloud ran is one the store knows.
    wait_for(lambda: not h.alive(), 30, what="every instance to end")
    assert {i.instance_id for i in h.instances()} <= set(attempts)
    assert daemon.status() is not None  # the last controller still runs (the harness stops it)


def stored_events(h: Harness, kind: str | None) -> list[dict[str, Any]]:
    query = select(agent_events.c.kind, agent_events.c.received_unix_s)
    if kind is not None:
        query = query.where(agent_events.c.kind == kind)
    with h.store() as store, store.engine.connect() as conn:
        return [{"kind": k, "received_unix_s": r} for k, r in conn.execute(query)]
