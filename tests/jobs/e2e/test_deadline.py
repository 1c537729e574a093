"""Done when (issue 17): a local-cloud job with a deadline runs to success through the same policy
code the simulator scores — ``advise`` and its safety rule, in the real controller daemon.

The world: one cloud, two zones, one type, whose spot markets (one trace) are up for the first
:data:`SPOT_UP_S` simulated seconds and then down for hours: the market preempts the job's spot
instance, and spot does not come back. The job: ``work`` 30 s, ``deadline`` 40 s,
``deadline_policy: greedy`` (spot whenever it is up, else wait), the controller deciding every
:data:`TICK_S` (``$SPOTHOP_DEADLINE_TICK_S``); the worker needs :data:`WORK_WALL_S` of wall time,
resumed from its progress file. Greedy would wait for spot for ever; the safety rule
(need = ⌈(W+d)/tick⌉ ≥ left = ⌊(D−t)/tick⌋) moves it to on-demand while the deadline can still be
met, and the job finishes before it. About 35 s of wall time. The assertions read the order of
the controller's decisions, never its pace.

Clocks: the job's ``created`` and its events share one clock, the attempts' times are the
provider's (5 simulated seconds per wall second here), so the assertions read the job's events only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller.config import DEADLINE_TICK_ENV
from tests.jobs.e2e import deadline_worker
from tests.jobs.e2e.conftest import SPEED, running_harness, script_job

TICK_S = 2.0  # seconds per deadline decision
TRACE_TICK_S = 10
SPOT_UP_S = 20  # the trace: spot up this long (simulated) from the cloud's first launch, then down
WORK_S = 30.0
DEADLINE_S = 40.0
WORK_WALL_S = 8.0  # what the worker really needs
SCRIPT = Path(deadline_worker.__file__)


def _world(tmp: Path) -> dict[str, Any]:
    down = [1] * 2000  # 1: unavailable (a 1-node trace's flag), for 20000 s
    up = [0] * (SPOT_UP_S // TRACE_TICK_S)
    (tmp / "closing.json").write_text(
        json.dumps({"metadata": {"gap_seconds": TRACE_TICK_S}, "data": up + down})
    )
    return {
        "seed": 3,
        "speed": SPEED,
        "clouds": [
            {
                "name": "aws-sim",
                "protocol": "aws",
                "catalog": "aws",
                "notice_lead_time_s": 10,
                "launch_delay_s": 1,
                "terminate_grace_s": 2,
                "locations": ["us-east-1a", "us-east-1b"],
                "instance_types": ["g5.xlarge"],
                "market": {"trace": "closing.json", "kind": "unavailable_flag"},
            }
        ],
    }


def test_a_deadline_job_switches_to_on_demand_by_the_safety_rule_and_finishes_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEADLINE_TICK_ENV, str(TICK_S))
    with running_harness(tmp_path, monkeypatch, _world(tmp_path)) as h:
        # The controller runs before the job exists: the deadline counts from the job's creation,
        # and a controller started by the launch (seconds of imports on a loaded machine) would
        # spend that budget before its first decision, which the safety rule then makes on-demand.
        h.start_controller()
        job_id = h.launch(
            {
                "name": "due",
                "deadline": DEADLINE_S,
                "work": WORK_S,
                "deadline_policy": "greedy",
                **script_job(SCRIPT),
                "envs": {"PROGRESS_FILE": str(tmp_path / "progress"), "WORK_WALL_S": WORK_WALL_S},
            }
        )
        final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 90, what="the job's end")
        assert final["state"] == "succeeded", final["reason"]
        with h.store() as store:
            job = store.get_job(job_id)
            events = store.events(job_id)
    launches = [e for e in events if e.kind == "attempt_launching"]
    assert launches[0].data["market_kind"] == "spot", launches[0]
    assert "deadline policy greedy: spot" in launches[0].data["reason"]
    ended = {e.data["attempt_id"]: e.data for e in events if e.kind == "attempt_ended"}
    assert ended[launches[0].data["attempt_id"]]["end_reason"] == "preempted"
    # The safety rule moved it to on-demand (greedy never asks for on-demand itself: it waits for
    # spot). Whether greedy waited a pass first, and whether a pass decides "none" again while the
    # on-demand instance runs (the rule's whole ticks round the slack), depends on how long the
    # controller's passes take against the simulated slack, so only the order of launches is
    # asserted: every launch before the first on-demand one was spot, and no spot one came after
    # it. (An on-demand launch's reason may be a failover between the plan's candidates.)
    od = [e for e in launches if e.data["market_kind"] == "on-demand"]
    assert od, launches
    assert all(e.data["market_kind"] == "spot" for e in launches if e.seq < od[0].seq)
    assert not [e for e in launches if e.seq > od[0].seq and e.data["market_kind"] == "spot"]
    # ... in time: the job succeeded before its deadline (its events and created are one clock).
    (done,) = [e for e in events if e.kind == "job_succeeded"]
    assert done.time_unix_s - job.created_unix_s <= DEADLINE_S, (done, job.created_unix_s)
