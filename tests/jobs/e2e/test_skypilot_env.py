"""SkyPilot's task variables, read from inside ``run`` on real instances, through a preemption.

A SkyPilot task file whose ``run`` records every ``SKYPILOT_*`` variable SkyPilot
documents for tasks is preempted once: both attempts see node rank 0 of 1 node,
their own address, the same task id (stable across the recovery) and a
cluster info naming the job and where that attempt runs; ``setup`` sees its own
rank and addresses too.
"""

from __future__ import annotations

import json
from pathlib import Path

from spothop.jobs.launcher import (
    SKYPILOT_CLUSTER_INFO,
    SKYPILOT_NODE_IPS,
    SKYPILOT_NODE_RANK,
    SKYPILOT_NUM_GPUS_PER_NODE,
    SKYPILOT_NUM_NODES,
    SKYPILOT_SETUP_NODE_IPS,
    SKYPILOT_SETUP_NODE_RANK,
    SKYPILOT_TASK_ID,
)
from tests.jobs.e2e.conftest import Harness
from tests.jobs.e2e.test_controller_restart import agent_up, new_running
from tests.waiting import wait_for

RUN_VARIABLES = (
    SKYPILOT_NODE_RANK,
    SKYPILOT_NODE_IPS,
    SKYPILOT_NUM_NODES,
    SKYPILOT_NUM_GPUS_PER_NODE,
    SKYPILOT_TASK_ID,
    SKYPILOT_CLUSTER_INFO,
)
SETUP_VARIABLES = (SKYPILOT_SETUP_NODE_RANK, SKYPILOT_SETUP_NODE_IPS, SKYPILOT_NUM_NODES)


def _record(names: tuple[str, ...], into: str) -> str:
    """bash that writes NAME=VALUE NUL-separated for each of ``names`` (unset: no entry)."""
    listed = " ".join(names)
    return (
        f"for v in {listed}; do\n"
        '  if [[ -n "${!v+x}" ]]; then printf \'%s=%s\\0\' "$v" "${!v}"; fi\n'
        f'done > "$OUT/{into}-$SPOTHOP_ATTEMPT_ID"\n'
    )


def _read(path: Path) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in path.read_text().split("\0") if item]
    return {name: value for name, value in pairs}


def test_run_reads_every_skypilot_variable_through_a_preemption(harness: Harness) -> None:
    h = harness
    out, gate = h.tmp / "env", h.tmp / "gate"
    out.mkdir()
    task = {
        "name": "sky-env",
        "resources": {"use_spot": True, "cloud": "aws-sim"},
        "envs": {"OUT": str(out)},
        "setup": _record(SETUP_VARIABLES, "setup"),
        "run": _record(RUN_VARIABLES, "run") + f"while [[ ! -e {gate} ]]; do sleep 0.1; done\n",
    }
    job_id = h.launch(task, "sky.yaml")
    [first] = new_running(h, job_id, 1, set())
    agent_up(h, first)
    wait_for(lambda: list(out.glob("run-*")), 30, what="the first run's variables")
    h.preempt(first, lead_time_s=60.0)
    new_running(h, job_id, 1, {first.instance_id})
    wait_for(lambda: len(list(out.glob("run-*"))) == 2, 60, what="the second run's variables")
    gate.touch()
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 60, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    where = {i["attempt_id"]: i for i in final["instances"]}
    assert len(where) == 2
    for attempt_id, instance in where.items():
        run = _read(out / f"run-{attempt_id}")
        assert set(run) == set(RUN_VARIABLES), run
        assert run[SKYPILOT_NODE_RANK] == "0" and run[SKYPILOT_NUM_NODES] == "1"
        assert run[SKYPILOT_TASK_ID] == job_id  # the same across the recovery
        assert run[SKYPILOT_NODE_IPS] and "\n" not in run[SKYPILOT_NODE_IPS]  # one node
        assert (
            int(run[SKYPILOT_NUM_GPUS_PER_NODE]) >= 1
        )  # the offering's count, from the controller
        info = json.loads(run[SKYPILOT_CLUSTER_INFO])
        assert info["cluster_name"] == job_id
        assert (info["cloud"], info["region"], info["zone"]) == (
            instance["provider"],
            instance["region"],
            instance["zone"],
        )
        setup = _read(out / f"setup-{attempt_id}")
        assert setup == {
            SKYPILOT_SETUP_NODE_RANK: "0",
            SKYPILOT_SETUP_NODE_IPS: run[SKYPILOT_NODE_IPS],
            SKYPILOT_NUM_NODES: "1",
        }
