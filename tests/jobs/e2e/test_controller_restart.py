"""Done when: the controller SIGKILLed twice mid-job and restarted: both jobs succeed, no instance
leaked, no event lost.

A gated batch job and a gated task run at once. The controller is SIGKILLed
(no chance to clean up) and, while it is dead, a worker is preempted and
reclaimed, so its agent's events land in the store with nobody reading them:
the home's agent API, a process of its own, outlives the controller and stores
them. The restarted controller adopts the instances it knows, reads the events
it missed from its cursor, and replaces the preempted worker. Then the task is
preempted and the controller killed *mid-launch* (the moment it stored the
replacement's attempt, before or during the cloud's launch call) and
restarted. The gates open only then, so the jobs are mid-run through both
kills whatever the machine's pace. Checked: every spothop-tagged instance
ended and belongs to exactly one stored attempt (none leaked, none launched
twice for one attempt); every event an agent logged on its instance
(``events.jsonl``) is in the store's ``agent_events``; each job's events tell
one consistent story (every transition legal and continuing from the last,
ending ``succeeded``; every attempt added was also ended); every shard once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from spothop.jobs.controller import TAG_JOB
from spothop.jobs.lifecycle import AttemptState, JobState, check_transition
from spothop.providers.base import Instance
from spothop.state.agent_tables import agent_events
from tests.jobs.e2e.conftest import Harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.waiting import wait_for

GATED_SHARDS = 200
TAG_ATTEMPT = "spothop-attempt"
LEAD_S = 10.0  # simulated seconds from a notice to the reclaim: 2 s of wall time at speed 5


def gated(gate: Path, command: str) -> str:
    """``command`` once ``gate`` exists: the worker stays mid-job until the test says."""
    return f"while [ ! -e {gate} ]; do sleep 0.1; done\n{command}"


def task_spec(tmp: Path) -> dict[str, Any]:
    return {
        "name": "task",
        "market": "spot",
        "tolerance": "aggressive",
        "run": gated(tmp / "task-gate", "echo task done"),
    }


def gated_batch_spec(tmp: Path) -> dict[str, Any]:
    spec = batch_spec(tmp, "gated", shards=GATED_SHARDS)
    spec["workers"] = 2
    spec["run"] = gated(tmp / "batch-gate", spec["run"])
    return spec


def new_running(h: Harness, job_id: str, count: int, old: set[str]) -> list[Instance]:
    """Wait until ``count`` instances of the job run, none of them in ``old``."""

    def ready() -> list[Instance] | None:
        running = [i for i in h.running(job_id) if i.instance_id not in old]
        return running if len(running) >= count else None

    return wait_for(ready, 60, what=f"{count} new instance(s) of {job_id} running", interval_s=0.1)


def agent_up(h: Harness, instance: Instance) -> None:
    """Wait until the instance's agent has checked itself and told the store so.

    An instance reclaimed before its agent is up dies with what it had not sent
    (as a real VM's disk does): no controller could get those events back.
    """

    def checked() -> bool:
        with h.store() as store, store.engine.connect() as conn:
            query = select(agent_events.c.event_id).where(
                agent_events.c.instance_id == instance.instance_id,
                agent_events.c.kind == "self_check",
            )
            return conn.execute(query).first() is not None

    wait_for(checked, 30, what=f"the agent of {instance.instance_id} up", interval_s=0.1)


def test_a_sigkill_mid_launch_leaves_one_instance_per_attempt_and_every_event_stored(
    harness: Harness,
) -> None:
    h = harness
    task = h.launch(task_spec(h.tmp), "task.yaml")
    batch = h.launch(gated_batch_spec(h.tmp), "gated.yaml")
    seen: set[str] = set()
    [task_instance] = new_running(h, task, 1, seen)
    workers = new_running(h, batch, 2, seen)
    seen |= {task_instance.instance_id, *(w.instance_id for w in workers)}

    # 2-3: killed; a worker preempted and reclaimed while no controller runs; restarted.
    h.kill_controller()
    victim = workers[0]
    agent_up(h, victim)
    h.preempt(victim, lead_time_s=LEAD_S)
    wait_for(
        lambda: not any(i.instance_id == victim.instance_id for i in h.alive(batch)),
        30,
        what="the preempted worker reclaimed",
    )
    h.start_controller()
    [replacement] = new_running(h, batch, 1, seen)
    seen.add(replacement.instance_id)

    # 4-5: the task preempted, the controller killed mid-launch of its replacement; restarted.
    with h.store() as store:
        before = {a.attempt_id for a in store.attempts(task)}
    agent_up(h, task_instance)
    h.preempt(task_instance, lead_time_s=LEAD_S)

    def launching() -> bool:
        with h.store() as store:
            return any(a.attempt_id not in before for a in store.attempts(task))

    wait_for(launching, 60, what="the task's replacement attempt stored", interval_s=0.01)
    h.kill_controller()
    h.start_controller()
    new_running(h, task, 1, seen)

    # 6: the gates open; both jobs finish.
    (h.tmp / "task-gate").touch()
    (h.tmp / "batch-gate").touch()
    for job_id in (task, batch):
        final = h.wait_state(
            job_id, {"succeeded", "failed", "cancelled"}, 60, what="the job to end"
        )
        assert final["state"] == "succeeded", (job_id, final["reason"])
    wait_for(lambda: not h.alive(), 30, what="every instance ended")

    check_exactly_once(h, batch, h.tmp / "out-gated", shards=GATED_SHARDS)
    for job_id in (task, batch):
        check_instances(h, job_id)
        check_agent_events(h, job_id)
        check_story(h, job_id)


def check_instances(h: Harness, job_id: str) -> None:
    """Every instance of the job ended, each one attempt's, no attempt with two instances."""
    instances = [i for i in h.instances() if i.tags.get(TAG_JOB) == job_id]
    assert all(not i.state.is_alive for i in instances), [
        (i.instance_id, i.state) for i in instances if i.state.is_alive
    ]
    per_attempt = Counter(i.tags.get(TAG_ATTEMPT) for i in instances)
    assert [a for a, n in per_attempt.items() if n > 1] == []  # none launched twice
    with h.store() as store:
        attempts = {a.attempt_id: a for a in store.attempts(job_id)}
    assert set(per_attempt) <= set(attempts)  # every instance is a stored attempt's
    for instance in instances:
        attempt = attempts[str(instance.tags[TAG_ATTEMPT])]
        assert attempt.state is AttemptState.ENDED, attempt
        assert attempt.instance_id in (None, instance.instance_id), (attempt, instance)
    assert all(a.state is AttemptState.ENDED for a in attempts.values())


def check_agent_events(h: Harness, job_id: str) -> None:
    """Every event an agent of the job logged on its instance reached the store."""
    logged: set[str] = set()
    for path in (p / "events.jsonl" for p in h.agent_dirs(job_id) if (p / "events.jsonl").exists()):
        for line in path.read_text().splitlines():
            if line.strip():
                logged.add(json.loads(line)["event_id"])
    assert logged
    with h.store() as store, store.engine.connect() as conn:
        stored = {
            r.event_id
            for r in conn.execute(
                select(agent_events.c.event_id).where(agent_events.c.job_id == job_id)
            )
        }
    assert sorted(logged - stored) == []


def check_story(h: Harness, job_id: str) -> None:
    """The job's events: transitions chained and legal, ending succeeded; launched attempts ended."""
    with h.store() as store:
        events = store.events(job_id)
        attempts = store.attempts(job_id)
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs))
    state = JobState.PENDING
    for event in events:
        if "from" in event.data and "to" in event.data:
            assert event.data["from"] == state.value, (event, state)
            target = JobState(event.data["to"])
            check_transition(state, target)
            state = target
    assert state is JobState.SUCCEEDED
    mentioned = Counter(str(e.data.get("attempt_id")) for e in events if "attempt_id" in e.data)
    for attempt in attempts:
        assert mentioned[attempt.attempt_id] >= 2, (attempt, mentioned)  # added, then ended
