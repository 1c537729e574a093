"""Done when: a checkpointed training task survives ≥ 3 preemptions on ≥ 2 clouds and succeeds,
its final state bit-identical to an uninterrupted run.

The worker (``numpy_train.py``) is a tiny deterministic numpy loop on the checkpoint
library: on each final notice it saves an emergency checkpoint to
``$SPOTHOP_CHECKPOINT_URL`` (which the controller hands it) and exits 75; each
relaunch restores the newest checkpoint that verifies. The job may run in one
zone of each cloud, so the 30-minute cooldowns of two preemptions in one cloud move it
to the other.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from spothop.checkpoint import list_checkpoints
from spothop.state.agent_tables import agent_events
from tests.jobs.e2e import numpy_train
from tests.jobs.e2e.conftest import Harness, script_job
from tests.waiting import wait_for

TOTAL = 200  # steps
STEP_SLEEP_S = 0.02
MIN_PREEMPTIONS = 3
MAX_PREEMPTIONS = 6
# Simulated seconds from each notice to the reclaim: 6 s of wall time at the harness's speed for
# the worker's emergency save (a fraction of a second); the default 60 (12 s) left the job's last
# noticed instance alive that long after the job ended, and the test waits for every instance.
LEAD_S = 30.0
SCRIPT = Path(numpy_train.__file__)


def newest_step(url: str) -> int:
    try:
        steps = [i.step or 0 for i in list_checkpoints(url) if i.status == "committed"]
    except Exception:  # the location does not exist until the first save
        return 0
    return max(steps, default=0)


def agent_events_of(h: Harness, job_id: str, kind: str) -> list[dict[str, Any]]:
    """The agents' events of one kind about the job, as stored."""
    with h.store() as store, store.engine.connect() as conn:
        rows = conn.execute(
            select(agent_events.c.payload).where(
                agent_events.c.job_id == job_id, agent_events.c.kind == kind
            )
        ).all()
    return [json.loads(r[0]) for r in rows]


def test_training_survives_preemptions_on_two_clouds_bit_identical(harness: Harness) -> None:
    h = harness
    ckpt = h.tmp / "ckpt"
    out = h.tmp / "final.bin"
    spec: dict[str, Any] = {
        "name": "train",
        "market": "spot",
        "tolerance": "aggressive",
        "zones": ["us-central1-a", "us-east-1a"],
        "checkpoint": {"url": str(ckpt)},
        **script_job(SCRIPT, TOTAL, out, "--step-sleep", STEP_SLEEP_S),
    }
    job_id = h.launch(spec)
    preempted: list[Any] = []
    clouds: set[str] = set()
    while len(preempted) < MIN_PREEMPTIONS or len(clouds) < 2:
        assert len(preempted) < MAX_PREEMPTIONS, f"still on {clouds} after {len(preempted)}"

        def progressing() -> Any:
            # Running, and its worker has restored and trained a step (it registered for stops).
            for i in h.running(job_id):
                control = h.agent_dir(i) / "control"
                if i.instance_id not in preempted and (control / "stop-callback").exists():
                    return i
            return None

        instance = wait_for(
            progressing, 60, what="the task training on a new instance", interval_s=0.1
        )
        clouds.add(instance.provider)
        h.preempt(instance, lead_time_s=LEAD_S)
        preempted.append(instance.instance_id)
        if newest_step(str(ckpt)) >= TOTAL - 10:
            break  # too near the end for another round: the test would not be about preemptions
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 120, what="the task to end")
    assert final["state"] == "succeeded", final["reason"]
    assert final["interruptions"] >= MIN_PREEMPTIONS
    # Each preemption: the worker's emergency save, told to the agent, and the next run resumed from it.
    assert len(agent_events_of(h, job_id, "interruption")) >= MIN_PREEMPTIONS
    assert len(agent_events_of(h, job_id, "saved")) >= MIN_PREEMPTIONS
    assert len({i["provider"] for i in final["instances"]}) >= 2
    # `spothop logs` shows the worker's output across every recovery, one header per attempt.
    code, text = h.cli("logs", job_id, "--store", h.store_url)
    assert code == 0
    assert text.count("── node 0 · attempt ") == len(final["instances"])
    assert text.count("starting at step") == len(final["instances"])
    assert "starting at step 0\n" in text
    reference = numpy_train.train(TOTAL)
    assert out.read_bytes() == reference.tobytes()
    wait_for(lambda: not h.alive(job_id), 30, what="the task's instances to end")
