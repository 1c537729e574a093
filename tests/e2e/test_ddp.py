"""Done when (issue M): a 2-node data-parallel job, one node preempted: both ranks save the same step,
the group is relaunched, and the final weights equal an uninterrupted 2-node run's bit for bit.

Real processes throughout: ``spothop launch`` and the controller daemon, two local-cloud
instances each running the agent and ``examples/ddp/train.py`` (torch.distributed, gloo, CPU),
the local cloud's preemption of node 1, the control plane's stop of node 0. The reference is the
same script run as two plain processes (no agent) with the same shape, started at the beginning
so that it runs while the job does.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from spothop.checkpoint import list_checkpoints
from spothop.providers.local.processes import descendants
from tests.e2e.ddp_helpers import (
    STEP_SLEEP_S,
    STEPS,
    Reference,
    assert_every_sample_once_per_epoch,
    job_command,
    records,
)
from tests.jobs.e2e.conftest import Harness, harness  # noqa: F401  (the e2e harness)
from tests.waiting import poll_until, wait_for

PREEMPT_AFTER_STEPS = 10


def kill_machine(h: Harness, instance: Any) -> None:
    """The instance's machine dies at once: its host and every process under it, SIGKILLed, no
    notice (the local cloud then reports the instance failed: its host died)."""
    row = h.providers[instance.provider].store.instance(instance.instance_id)
    assert row is not None and row["host_pid"]
    host = int(row["host_pid"])
    # The host first: killed after its unit, it could see the unit exit and record the instance
    # terminated (an end of its own) before its own death made it failed.
    for pid in [host, *descendants(host)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def committed_steps(ckpt: Path, rank: int) -> list[int]:
    infos = list_checkpoints(str(ckpt / f"rank-{rank:05d}"))
    return [i.step or 0 for i in infos if i.status == "committed"]


def emergency_steps(ckpt: Path, rank: int) -> list[int]:
    infos = list_checkpoints(str(ckpt / f"rank-{rank:05d}"))
    return [i.step or 0 for i in infos if i.status == "committed" and i.tier == "emergency"]


def two_node_spec(h: Harness, name: str, *extra: str) -> dict[str, Any]:
    """A 2-node spot job of the example on one cloud, checkpointing under the test's folder."""
    seen, out = h.tmp / "seen", h.tmp / "final.bin"
    return {
        "name": name,
        "num_nodes": 2,
        "market": "spot",
        "tolerance": "aggressive",
        "providers": {"allow": ["aws-sim"]},
        "checkpoint": {"url": str(h.tmp / "ckpt")},
        **job_command(STEPS, out, seen, "--step-sleep", str(STEP_SLEEP_S), *extra),
    }


def test_a_two_node_job_preempted_on_one_node_resumes_bit_identical(
    harness: Harness,  # noqa: F811
    ddp_reference: Reference,
) -> None:
    h = harness
    ckpt, seen, out = h.tmp / "ckpt", h.tmp / "seen", h.tmp / "final.bin"
    spec = two_node_spec(h, "ddp")
    job_id = h.launch(spec)

    def training() -> list[Any] | None:
        running = h.running(job_id)
        lines = records(seen) if seen.exists() else []
        steps = [r["step"] for r in lines if r["rank"] == 1]
        return (
            running if len(running) == 2 and max(steps, default=0) >= PREEMPT_AFTER_STEPS else None
        )

    # Both nodes boot, install, form their group (a torch rendezvous, formed again where it timed
    # out under load) and train a few steps: 25-40 s beside two spinning processes, more than 90 s
    # once in a stress run that also had a whole clean-clone suite beside it.
    group = poll_until(training, 240, interval_s=0.2)
    if not group:
        steps = [r["step"] for r in records(seen) if r["rank"] == 1] if seen.exists() else []
        shown = [(i["node"], i["generation"], i["state"]) for i in h.status(job_id)["instances"]]
        pytest.fail(
            f"both nodes training not met: rank 1 at step {max(steps, default=None)}, {shown}"
        )
    node1 = next(i for i in group if i.tags["spothop-node"] == "1")
    h.preempt(node1, lead_time_s=60)

    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 150, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    assert final["interruptions"] == 1  # node 1's; node 0 was stopped with its group

    # Both ranks saved one emergency checkpoint, of the same step.
    saved = [emergency_steps(ckpt, rank) for rank in (0, 1)]
    assert saved[0] == saved[1] and len(saved[0]) == 1, saved
    step = saved[0][0]
    assert PREEMPT_AFTER_STEPS <= step < STEPS
    # The group was relaunched together, every generation whole, and went on from that step on
    # every rank. One relaunch is the rule; on a loaded machine a new group can fail to form (its
    # rendezvous times out) and is formed again, so later generations are allowed, each whole,
    # none of them preempted (the job saw one interruption).
    with h.store() as store:
        attempts = store.attempts(job_id)
    by_generation = {(a.generation, a.node): a for a in attempts}
    generations = sorted({g for g, _ in by_generation})
    assert generations == list(range(len(generations))) and len(generations) >= 2, generations
    assert set(by_generation) == {(g, n) for g in generations for n in (0, 1)}
    shown = sorted((i["generation"], i["node"], i["group_nnodes"]) for i in final["instances"])
    assert shown == [(g, n, 2) for g, n in sorted(by_generation)]  # what `spothop status` shows
    assert str(by_generation[(0, 1)].end_reason) == "preempted"
    assert str(by_generation[(0, 0)].end_reason) == "superseded"
    firsts = {
        r["rank"]: r["step"]
        for r in records(seen)
        if r["generation"] >= 1 and r["step"] == step + 1
    }
    assert firsts == {0: step + 1, 1: step + 1}
    assert_every_sample_once_per_epoch(seen)

    assert out.read_bytes() == ddp_reference.weights
    wait_for(lambda: not h.alive(job_id), 30, what="the job's instances to end")


@pytest.mark.slow  # a second full 2-node run with its reference: about 60-80 s on a loaded machine
def test_a_node_lost_without_notice_resumes_the_group_from_the_last_committed_step(
    harness: Harness,  # noqa: F811
    ddp_reference: Reference,
) -> None:
    h = harness
    ckpt, seen, out = h.tmp / "ckpt", h.tmp / "seen", h.tmp / "final.bin"
    every = 10
    spec = two_node_spec(h, "ddp-lost", "--save-every", str(every))
    job_id = h.launch(spec)

    def past_a_save() -> list[Any] | None:
        running = h.running(job_id)
        done = [r["step"] for r in records(seen) if r["rank"] == 1] if seen.exists() else []
        saved = committed_steps(ckpt, 1) if (ckpt / "rank-00001").exists() else []
        ready = len(running) == 2 and saved and max(done, default=0) >= saved[-1] + 3
        return running if ready else None

    group = wait_for(past_a_save, 90, what="both nodes training past a save", interval_s=0.2)
    kill_machine(h, next(i for i in group if i.tags["spothop-node"] == "1"))

    final = h.wait_state(job_id, {"succeeded", "failed", "cancelled"}, 150, what="the job to end")
    assert final["state"] == "succeeded", final["reason"]
    with h.store() as store:
        attempts = store.attempts(job_id)
    lost = next(a for a in attempts if a.generation == 0 and a.node == 1)
    assert str(lost.end_reason) == "failed"
    assert {(a.generation, a.node) for a in attempts} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # No emergency save (there was no notice): generation 1 went on from a periodic step,
    # the same on both ranks, redoing the steps after it.
    assert emergency_steps(ckpt, 0) == emergency_steps(ckpt, 1) == []
    firsts = {r["rank"]: r["step"] for r in records(seen) if r["generation"] == 1}
    restart = min(r["step"] for r in records(seen) if r["generation"] == 1)
    assert (restart - 1) % every == 0 and set(firsts) == {0, 1}
    assert all(
        min(r["step"] for r in records(seen) if r["generation"] == 1 and r["rank"] == rank)
        == restart
        for rank in (0, 1)
    )
    assert_every_sample_once_per_epoch(seen)
    assert out.read_bytes() == ddp_reference.weights
