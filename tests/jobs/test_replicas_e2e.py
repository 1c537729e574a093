"""Done when (issue 20, replicas): two controller replicas on PostgreSQL + Redis, one SIGKILLed mid-job.

Two real processes (``spothop controller run --replica``) share one
PostgreSQL store (a fresh schema) and the Redis shard queue. A batch job on
the local cloud is claimed by one of them; mid-job that replica is SIGKILLed
and, while no one holds the job, one of its workers is preempted (its agent
records the interruption with nobody acting on it). The other replica must
take the job over within one lease period (the lease owner changes), act on
the event it never saw (the preempted worker replaced), and finish the job:
every shard once (none lost, none duplicated), every event the agents logged
stored, every instance ended and known, the job's story legal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from spothop.jobs.spec import load_job
from spothop.service.launch import launch_job
from spothop.state.job_tables import jobs
from tests.conftest import REDIS_URL
from tests.jobs.e2e.conftest import SLOW_TERMINATE, Harness, running_harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.jobs.e2e.test_controller_restart import (
    agent_up,
    check_instances,
    check_story,
    task_spec,
)
from tests.jobs.test_replicas import schema_url
from tests.waiting import process_running, scaled, wait_for

LEASE_S = 3.0
SHARDS = 300
WORK_S_PER_SHARD = 0.05  # two workers: ~8 s of work, so the kill lands mid-job
TAKEOVER_SLACK_S = 10.0
LEAD_S = 30.0  # simulated seconds from the notice to the reclaim (6 s of wall time)


class Replicas:
    """Replica processes of one store, by name; their output in ``<tmp>/replica-<name>.log``."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        log = open(self.h.tmp / f"replica-{name}.log", "ab")  # noqa: SIM115 - the child's
        command = [
            sys.executable,
            "-m",
            "spothop.cli.main",
            "controller",
            "run",
            "--replica",
            "--replica-id",
            name,
            "--lease-s",
            str(LEASE_S),
            "--period",
            "1",
            "--store",
            self.h.store_url,
            "--queue-url",
            REDIS_URL,
        ]
        self.procs[name] = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ
        )
        log.close()

    def log(self, name: str) -> str:
        return (self.h.tmp / f"replica-{name}.log").read_text(errors="replace")

    def stop_all(self) -> dict[str, int | None]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(scaled(30))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes


@pytest.fixture
def replicas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str, redis_prefix: str
) -> Iterator[Replicas]:
    del redis_prefix  # proves Redis answers; the job's keys are deleted below
    with running_harness(tmp_path, monkeypatch, SLOW_TERMINATE, ("--queue-url", REDIS_URL)) as h:
        h.store_url = schema_url(pg_schema)
        r = Replicas(h)
        try:
            yield r
        finally:
            r.stop_all()
            _delete_queue_keys(h)


def _delete_queue_keys(h: Harness) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    with h.store() as store:
        for job in store.list_jobs():
            keys = list(client.scan_iter(match=f"*{{{job.job_id}}}*", count=1000))
            if keys:
                client.delete(*keys)
    client.close()


def check_acknowledged_events(h: Harness, job_id: str, must: set[str]) -> None:
    """Every event of every agent that finished its protocol (it logged ``exited``: all it said
    was handed over and acknowledged) is stored; ``must`` (instance ids) are among those.

    An agent the cloud killed mid-protocol (an instance released right after it booted, its
    emergency protocol holding its events until its worker's leases went back) dies with what
    it had not sent: no control plane acknowledged those, and none can get them back.
    """
    from spothop.state.agent_tables import agent_events

    logged: dict[str, set[str]] = {}
    for path in (p / "events.jsonl" for p in h.agent_dirs(job_id) if (p / "events.jsonl").exists()):
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if any(e["kind"] == "exited" for e in events):
            logged[str(events[0]["instance_id"])] = {str(e["event_id"]) for e in events}
    assert must <= set(logged), (must, sorted(logged))
    with h.store() as store, store.engine.connect() as conn:
        stored = {
            r[0]
            for r in conn.execute(
                select(agent_events.c.event_id).where(agent_events.c.job_id == job_id)
            )
        }
    assert {i: sorted(ids - stored) for i, ids in logged.items() if ids - stored} == {}


def lease(h: Harness, job_id: str) -> tuple[str | None, int]:
    with h.store() as store, store.engine.connect() as conn:
        row = conn.execute(
            select(jobs.c.lease_owner, jobs.c.lease_token).where(jobs.c.job_id == job_id)
        ).one()
    return row.lease_owner, int(row.lease_token)


def shards_done(h: Harness, job_id: str) -> int:
    from spothop.queue import open_queue

    with open_queue(REDIS_URL, job_id) as queue:
        return int(queue.stats().done)


def test_a_replica_sigkilled_mid_job_its_job_goes_on_under_the_other(
    replicas: Replicas,
) -> None:
    r, h = replicas, replicas.h
    r.start("r-a")
    r.start("r-b")
    spec: dict[str, Any] = batch_spec(h.tmp, "replicas", shards=SHARDS)
    spec["workers"] = 2
    spec["envs"] = {"WORK_S_PER_SHARD": str(WORK_S_PER_SHARD)}
    with h.store() as store:
        job_id = launch_job(store, load_job(spec)).job_id  # its workdir packed, as launch does

    def held_by(name: str | None = None) -> tuple[str | None, int] | None:
        found = lease(h, job_id)
        return found if found[0] and (name is None or found[0] == name) else None

    owner, token = wait_for(held_by, 60, what="a replica to claim the job")
    assert owner in ("r-a", "r-b")
    survivor = "r-b" if owner == "r-a" else "r-a"

    def two_running() -> list[Any] | None:
        running = h.running(job_id)
        return running if len(running) >= 2 else None

    workers = wait_for(
        two_running,
        90,
        what="both workers running",
        interval_s=0.1,
    )
    wait_for(lambda: shards_done(h, job_id) >= 10, 60, what="the work under way", interval_s=0.1)
    assert shards_done(h, job_id) < SHARDS  # mid-job

    # The holder dies without a word; while no one holds the job, a worker is preempted.
    r.procs[owner].send_signal(signal.SIGKILL)
    r.procs[owner].wait(scaled(10))
    victim = workers[0]
    agent_up(h, victim)
    h.preempt(victim, lead_time_s=LEAD_S)

    # The other replica takes it within one lease period (+ its claim tick, + slack for a box
    # shared by many test runs: a starved process's tick can lag by seconds).
    taken = wait_for(
        lambda: held_by(survivor),
        LEASE_S + LEASE_S / 3 + TAKEOVER_SLACK_S,
        what=f"{survivor} to take the job over",
        interval_s=0.05,
    )
    assert taken[1] > token  # a new token: the dead replica's writes are fenced out

    final = h.wait_final(job_id, 120, what="the job to end under the surviving replica")
    assert str(final.state) == "succeeded", final.reason
    status = h.status(job_id)
    assert status["interruptions"] >= 1  # the event the killed replica never saw was acted on
    wait_for(lambda: not h.alive(job_id), 30, what="every worker released")
    assert r.procs[survivor].poll() is None  # still running

    check_exactly_once(h, job_id, h.tmp / "out-replicas", queue_url=REDIS_URL, shards=SHARDS)
    check_instances(h, job_id)
    check_acknowledged_events(h, job_id, {victim.instance_id})
    check_story(h, job_id)
    with h.store() as store:
        attempts = {a.instance_id: a for a in store.attempts(job_id)}
    assert str(attempts[victim.instance_id].end_reason) in ("preempted", "superseded")

    # A clean stop: the survivor exits 0 and leaves no lease behind.
    codes = r.stop_all()
    assert codes[survivor] == 0, r.log(survivor)[-3000:]
    assert lease(h, job_id)[0] is None  # finished: released at the renewal after it ended
    assert not process_running(r.procs[survivor].pid)


def test_a_paused_replica_wakes_to_find_its_job_taken_and_touches_nothing(
    replicas: Replicas,
) -> None:
    """SIGSTOP the holder past its lease, the other takes the job; SIGCONT: the woken replica
    drops the job, and launches, ends or writes nothing of it (one attempt, one instance)."""
    r, h = replicas, replicas.h
    r.start("r-a")
    r.start("r-b")
    gate = h.tmp / "task-gate"
    with h.store() as store:
        job_id = launch_job(store, load_job(task_spec(h.tmp))).job_id

    def held_by(name: str | None = None) -> tuple[str | None, int] | None:
        found = lease(h, job_id)
        return found if found[0] and (name is None or found[0] == name) else None

    owner, _ = wait_for(held_by, 60, what="a replica to claim the job")
    other = "r-b" if owner == "r-a" else "r-a"
    [instance] = wait_for(lambda: h.running(job_id), 90, what="the task running", interval_s=0.1)

    r.procs[owner].send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: held_by(other),
            LEASE_S + LEASE_S / 3 + TAKEOVER_SLACK_S,
            what=f"{other} to take it",
        )
    finally:
        r.procs[owner].send_signal(signal.SIGCONT)
    wait_for(
        lambda: f"lost the lease on {job_id}" in r.log(owner),
        30,
        what=f"{owner} to find its lease gone and drop the job",
    )
    gate.touch()

    final = h.wait_final(job_id, 60, what="the task to end")
    assert str(final.state) == "succeeded", final.reason
    assert held_by(other) or lease(h, job_id)[0] is None  # never back to the woken one
    with h.store() as store:
        attempts = store.attempts(job_id)
    assert [a.instance_id for a in attempts] == [instance.instance_id]  # adopted, not relaunched
    wait_for(lambda: not h.alive(job_id), 30, what="the instance to end")
    check_instances(h, job_id)
    check_story(h, job_id)
    assert r.procs[owner].poll() is None and r.procs[other].poll() is None
