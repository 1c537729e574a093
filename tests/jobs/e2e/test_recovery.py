"""Recovery e2e: make-before-break on an advance notice, and max_interruptions (on-demand | fail).

The world is the e2e harness's (speed 5; aws-sim gives an advance signal 60 s before its final
notice, as AWS's rebalance recommendation does). Interruptions are injected.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jobs.e2e.conftest import WORLD, Harness, controller_file, running_harness
from tests.jobs.e2e.test_batch import check_exactly_once
from tests.jobs.e2e.test_controller_restart import (
    GATED_SHARDS,
    agent_up,
    gated,
    gated_batch_spec,
    new_running,
)
from tests.waiting import wait_for

AWS_ONLY: dict[str, Any] = {"providers": {"allow": ["aws-sim"]}}
ADVANCE_S = 100.0  # simulated seconds from the advance signal to the final notice (20 s wall)
LEAD_S = 60.0  # and from the final notice to the reclaim


def test_an_advance_notice_gets_a_running_replacement_before_the_old_instance_dies(
    harness: Harness,
) -> None:
    h = harness
    spec = {**gated_batch_spec(h.tmp), **AWS_ONLY}
    job_id = h.launch(spec, "gated.yaml")
    workers = new_running(h, job_id, 2, set())
    victim = workers[0]
    agent_up(h, victim)
    h.preempt(victim, lead_time_s=LEAD_S, advance_s=ADVANCE_S)
    old = {w.instance_id for w in workers}

    def replaced_while_alive() -> tuple[str, bool] | None:
        alive = h.alive(job_id)  # one listing: the replacement and the victim seen together
        new = [i for i in alive if i.instance_id not in old and i.state.value == "running"]
        if not new:
            return None
        return new[0].instance_id, any(i.instance_id == victim.instance_id for i in alive)

    replacement, victim_alive = wait_for(
        replaced_while_alive, 60, what="a replacement running", interval_s=0.1
    )
    assert victim_alive, "the replacement ran only after the old instance died"
    (h.tmp / "batch-gate").touch()
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 60, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    check_exactly_once(h, job_id, h.tmp / "out-gated", shards=GATED_SHARDS)
    assert replacement in {i["instance_id"] for i in final["instances"]}
    wait_for(lambda: not h.alive(job_id), 30, what="every worker released")


def _task(h: Harness, on_max: str) -> dict[str, Any]:
    return {
        "name": f"task-{on_max}",
        "market": "spot",
        "tolerance": "aggressive",
        "max_interruptions": 1,
        "on_max_interruptions": on_max,
        "run": gated(h.tmp / f"gate-{on_max}", "echo task done"),
        **AWS_ONLY,
    }


def test_max_interruptions_moves_the_job_to_on_demand_and_it_succeeds(harness: Harness) -> None:
    h = harness
    job_id = h.launch(_task(h, "on-demand"))
    [first] = new_running(h, job_id, 1, set())
    agent_up(h, first)
    h.preempt(first, lead_time_s=LEAD_S)
    [second] = new_running(h, job_id, 1, {first.instance_id})
    assert not second.spot, "the relaunch after max_interruptions must be on-demand"
    (h.tmp / "gate-on-demand").touch()
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 60, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    assert final["on_demand_forced"]
    markets = {i["instance_id"]: i["market"] for i in final["instances"]}
    assert markets[second.instance_id] == "on-demand" and markets[first.instance_id] == "spot"


def test_max_interruptions_with_fail_ends_the_job_failed_with_the_reason(
    harness: Harness,
) -> None:
    h = harness
    job_id = h.launch(_task(h, "fail"))
    [first] = new_running(h, job_id, 1, set())
    agent_up(h, first)
    h.preempt(first, lead_time_s=LEAD_S)
    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 60, what="the job to end")
    assert final["state"] == "failed"
    assert "max_interruptions (1) reached" in (final["reason"] or "")
    wait_for(lambda: not h.alive(job_id), 30, what="the task's instances to end")


@pytest.fixture
def blind_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """The e2e world, but gcp-sim's instances reach no metadata endpoint: their agents are
    notice-blind (``metadata_options: {endpoint: down}``)."""
    world = copy.deepcopy(WORLD)
    gcp = next(c for c in world["clouds"] if c["name"] == "gcp-sim")
    gcp["metadata_options"] = {"endpoint": "down"}
    queue = ("--queue-url", f"sqlite:///{controller_file('queue.db')}")
    with running_harness(tmp_path, monkeypatch, world, queue) as h:
        yield h


def test_a_notice_blind_instance_is_replaced_as_its_tolerance_says(blind_harness: Harness) -> None:
    h = blind_harness
    on_gcp: dict[str, Any] = {"providers": {"allow": ["gcp-sim"]}, "market": "spot"}
    # conservative: never a notice-blind spot instance; its replacement runs on-demand first.
    careful = h.launch(
        {
            "name": "careful",
            "tolerance": "conservative",
            **on_gcp,
            "run": gated(h.tmp / "gate", "echo careful done"),
        },
        "careful.yaml",
    )
    # aggressive: a notice-blind instance is kept (the periodic checkpoint bounds the loss).
    bold = h.launch(
        {
            "name": "bold",
            "tolerance": "aggressive",
            **on_gcp,
            "run": gated(h.tmp / "gate", "echo bold done"),
        },
        "bold.yaml",
    )

    def on_demand_running() -> Any:
        running = [i for i in h.running(careful) if not i.spot]
        return running[0] if running else None

    replacement = wait_for(on_demand_running, 60, what="the careful job's on-demand replacement")
    [kept] = wait_for(lambda: h.running(bold), 60, what="the bold job running")
    (h.tmp / "gate").touch()
    for job_id in (careful, bold):
        final = h.wait_state(
            job_id, {"succeeded", "failed", "cancelled"}, 60, what="the job to end"
        )
        assert final["state"] == "succeeded", (job_id, final["reason"])
    careful_final, bold_final = h.status(careful), h.status(bold)
    markets = [i["market"] for i in careful_final["instances"]]
    assert markets[0] == "spot" and replacement.instance_id in {
        i["instance_id"] for i in careful_final["instances"]
    }
    assert [i["instance_id"] for i in bold_final["instances"]] == [kept.instance_id]
    assert kept.spot
