"""The real agent's HTTP control plane against `spothop server run` (PostgreSQL, Redis queue): what it
sends is stored once, its requests come and go, its worker's leases go back through the real queue, and
its token reaches its own job and instance only — job B's events, leases, requests, logs and
checkpoints are 403 to job A's agent; a revoked token is 401 at once."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from spothop.controlplane import Heartbeat, HttpControlPlane, Registration
from spothop.queue import Shard, open_queue
from spothop.state.agent_requests import add_request
from spothop.state.agent_tables import agent_events, agent_heartbeats
from spothop.state.worker_logs import read_after
from spothop.wire.errors import ControlPlaneAuthError, LogOffsetGap
from spothop.wire.events import WorkerStarted
from spothop.wire.logs import CHUNK_MAX_BYTES, LogChunk
from tests.conftest import unique
from tests.server.conftest import Served, drop_redis_job


@dataclass
class Agent:
    job_id: str
    instance_id: str
    worker_id: str
    token: str

    def plane(self, served: Served, tmp: Path, instance_id: str | None = None) -> HttpControlPlane:
        return HttpControlPlane(
            served.server.url,
            instance_id or self.instance_id,
            token=self.token,
            spool_dir=tmp / f"spool-{instance_id or self.instance_id}",
            attempts=1,
        )


@pytest.fixture
def agents(served: Served) -> Iterator[tuple[Agent, Agent]]:
    made = []
    for name in ("a", "b"):
        job, instance = unique(f"job-{name}"), unique(f"i-{name}")
        made.append(
            Agent(job, instance, f"w-{instance}", served.tokens.issue_agent_token(job, instance))
        )
    yield made[0], made[1]
    for agent in made:
        drop_redis_job(agent.job_id)


def _register(served: Served, agent: Agent, tmp: Path) -> HttpControlPlane:
    plane = agent.plane(served, tmp)
    plane.register(
        Registration(instance_id=agent.instance_id, provider="aws-sim", worker_id=agent.worker_id)
    )
    return plane


def test_the_agent_registers_heartbeats_and_its_events_are_stored_once(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    a, _ = agents
    plane = _register(served, a, tmp_path)
    plane.heartbeat(
        Heartbeat(
            a.instance_id,
            a.worker_id,
            1_800_000_010.0,
            "running",
            7,
            0,
            None,
            False,
            worker_step=12,
        )
    )
    event = WorkerStarted(instance_id=a.instance_id, job_id=a.job_id, pid=7, command=("python",))
    plane.record(event)
    plane.record(event)  # resent: stored once
    assert plane.flush(5.0) == 0
    with served.tokens.engine.connect() as conn:
        beats = conn.execute(
            select(agent_heartbeats).where(agent_heartbeats.c.instance_id == a.instance_id)
        ).all()
        events = conn.execute(
            select(agent_events).where(agent_events.c.instance_id == a.instance_id)
        ).all()
    assert [(b.state, b.job_id, b.worker_pid, b.worker_step) for b in beats] == [
        ("running", a.job_id, 7, 12)  # the job id filled in from the token
    ]
    assert [(e.event_id, e.kind, e.job_id) for e in events] == [
        (event.event_id, "worker_started", a.job_id)
    ]


def test_requests_come_oldest_first_and_leave_once_acknowledged(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    a, _ = agents
    plane = a.plane(served, tmp_path)
    first = add_request(served.tokens.engine, a.instance_id, "checkpoint", "rebalance")
    second = add_request(served.tokens.engine, a.instance_id, "stop", "drain")
    assert [(r.request_id, r.kind) for r in plane.requests()] == [
        (first, "checkpoint"),
        (second, "stop"),
    ]
    plane.acknowledge(first)
    assert [r.request_id for r in plane.requests()] == [second]


def test_the_workers_leases_go_back_to_its_jobs_queue(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    a, _ = agents
    plane = _register(served, a, tmp_path)
    with open_queue(served.queue_url, a.job_id) as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(4)])
        assert len(queue.claim(a.worker_id, 3, lease_s=600)) == 3
        assert plane.release_leases(a.worker_id) == 3
        stats = queue.stats()
        assert (stats.leased, stats.pending) == (0, 4)
    assert plane.release_leases(a.worker_id) == 0


def test_job_as_agent_is_refused_everything_of_job_b(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    a, b = agents
    _register(served, a, tmp_path)
    b_plane = _register(served, b, tmp_path)
    server = served.server
    b_path = f"/v1/agents/{b.instance_id}"
    beat = {"instance_id": b.instance_id, "time_unix_s": 1.0, "state": "running"}
    b_event = WorkerStarted(instance_id=b.instance_id, job_id=b.job_id).to_dict()
    b_request = add_request(served.tokens.engine, b.instance_id, "checkpoint", "b's")
    refused = [
        server.call("POST", f"{b_path}/heartbeat", token=a.token, body=beat),
        server.call("POST", f"{b_path}/events", token=a.token, body={"events": [b_event]}),
        server.call("GET", f"{b_path}/requests", token=a.token),
        server.call("GET", f"{b_path}/rendezvous", token=a.token),
        server.call("GET", f"{b_path}/secrets", token=a.token),
        server.call("POST", f"{b_path}/requests/{b_request}/ack", token=a.token, body={}),
        server.call(
            "POST", f"{b_path}/leases/release", token=a.token, body={"worker_id": b.worker_id}
        ),
        # on A's own path, naming B's instance, job, worker or request:
        server.call("POST", f"/v1/agents/{a.instance_id}/heartbeat", token=a.token, body=beat),
        server.call(
            "POST", f"/v1/agents/{a.instance_id}/events", token=a.token, body={"events": [b_event]}
        ),
        server.call(
            "POST",
            f"/v1/agents/{a.instance_id}/events",
            token=a.token,
            body={"events": [WorkerStarted(instance_id=a.instance_id, job_id=b.job_id).to_dict()]},
        ),
        server.call(
            "POST",
            f"/v1/agents/{a.instance_id}/leases/release",
            token=a.token,
            body={"worker_id": b.worker_id},
        ),
        server.call(
            "POST", f"/v1/agents/{a.instance_id}/requests/{b_request}/ack", token=a.token, body={}
        ),
        # the user API's reads of job B:
        server.call("GET", f"/v1/jobs/{b.job_id}", token=a.token),
        server.call("GET", f"/v1/jobs/{b.job_id}/events", token=a.token),
        server.call("GET", f"/v1/jobs/{b.job_id}/logs", token=a.token),
        server.call("GET", f"/v1/jobs/{b.job_id}/checkpoints", token=a.token),
        server.call("GET", f"/v1/jobs/{b.job_id}/report", token=a.token),
        server.call("GET", f"/v1/instances?job_id={b.job_id}", token=a.token),
        # and what an agent may never do:
        server.call("POST", "/v1/jobs", token=a.token, body={"spec": "run: x"}),
        server.call("POST", f"/v1/jobs/{b.job_id}/cancel", token=a.token, body={}),
    ]
    assert [status for status, _, _ in refused] == [403] * len(refused), refused
    assert all(body["error"]["type"] == "Forbidden" for _, body, _ in refused)
    # Nothing of B's changed: its request waits, its event was not written.
    assert [r.request_id for r in b_plane.requests()] == [b_request]
    with served.tokens.engine.connect() as conn:
        assert not conn.execute(
            select(agent_events).where(agent_events.c.event_id == b_event["event_id"])
        ).first()
    # The real agent plane, pointed at B's instance with A's token, is told so at once.
    with pytest.raises(ControlPlaneAuthError):
        a.plane(served, tmp_path, instance_id=b.instance_id).requests()
    # Its own rendezvous: none (it runs no grouped attempt), answered, not refused.
    assert a.plane(served, tmp_path).rendezvous() is None
    assert a.plane(served, tmp_path).secrets() == {}  # and no secrets: it runs no attempt


def test_a_worker_of_another_job_keeps_its_leases(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    a, b = agents
    a_plane = _register(served, a, tmp_path)
    _register(served, b, tmp_path)
    with open_queue(served.queue_url, b.job_id) as queue:
        queue.enqueue([Shard("s0", {}), Shard("s1", {})])
        queue.claim(b.worker_id, 2, lease_s=600)
        with pytest.raises(ControlPlaneAuthError):
            a_plane.release_leases(b.worker_id)
        assert queue.stats().leased == 2


def test_a_user_token_is_refused_by_the_agent_api(
    served: Served, agents: tuple[Agent, Agent]
) -> None:
    a, _ = agents
    _, user_token = served.tokens.create_user(unique("u").lower(), "vision")
    status, body, _ = served.server.call(
        "GET", f"/v1/agents/{a.instance_id}/requests", token=user_token
    )
    assert status == 403 and "agent" in body["error"]["message"]


def test_a_revoked_agent_token_is_refused_at_once(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    a, _ = agents
    plane = a.plane(served, tmp_path)
    assert plane.requests() == []  # verified, and now in the server's cache
    assert served.tokens.revoke_agent_tokens(a.job_id, a.instance_id) == 1
    with pytest.raises(ControlPlaneAuthError, match="401"):
        plane.requests()


def test_a_heartbeat_answers_as_the_app_does_once_its_token_is_cached(
    served: Served, agents: tuple[Agent, Agent]
) -> None:
    """The common beat is answered before the app (server.beats.HeartbeatFastPath); a beat that is
    no 200 still gets the app's own answer, and a revoked token is refused at the next beat."""
    a, _ = agents
    server, path = served.server, f"/v1/agents/{a.instance_id}/heartbeat"
    beat = {"instance_id": a.instance_id, "time_unix_s": 2.0, "state": "running"}
    _, user_token = served.tokens.create_user(unique("u").lower(), "vision")
    assert server.call("GET", "/v1/whoami", token=user_token)[0] == 200  # cached too
    assert server.call("POST", path, token=a.token, body=beat)[:2] == (200, {"status": "ok"})
    status, body, _ = server.call("POST", path, token=a.token, body={**beat, "state": ""})
    assert status == 422 and body["error"]["problems"][0]["field"].endswith("state")
    status, body, _ = server.call("POST", path, token=user_token, body=beat)
    assert status == 403 and "agent" in body["error"]["message"]
    raw = server.call("POST", path, token=a.token, raw=b"{not json", headers=_JSON)
    assert raw[0] == 422
    assert served.tokens.revoke_agent_tokens(a.job_id, a.instance_id) == 1
    status, body, _ = server.call("POST", path, token=a.token, body=beat)
    assert status == 401 and body["error"]["type"] == "Unauthorized"
    with served.tokens.engine.connect() as conn:
        stored = conn.execute(
            select(agent_heartbeats.c.time_unix_s).where(
                agent_heartbeats.c.instance_id == a.instance_id
            )
        ).scalar_one()
    assert stored == 2.0  # the one beat answered 200 is the one stored


_JSON = {"Content-Type": "application/json"}


def test_a_batch_of_events_is_stored_once_each_in_one_call(
    served: Served, agents: tuple[Agent, Agent]
) -> None:
    a, _ = agents
    one, two, three = (
        WorkerStarted(instance_id=a.instance_id, job_id=a.job_id, pid=n).to_dict()
        for n in (1, 2, 3)
    )
    path = f"/v1/agents/{a.instance_id}/events"
    first = served.server.call("POST", path, token=a.token, body={"events": [one, one, two]})
    again = served.server.call("POST", path, token=a.token, body={"events": [two, three]})
    assert first[:2] == (200, {"received": 3, "stored": 2})
    assert again[:2] == (200, {"received": 2, "stored": 1})
    with served.tokens.engine.connect() as conn:
        stored = conn.execute(
            select(agent_events.c.event_id).where(agent_events.c.instance_id == a.instance_id)
        ).scalars()
        assert sorted(stored) == sorted(e["event_id"] for e in (one, two, three))


def test_an_agents_log_chunks_go_to_its_own_job_only(
    served: Served, agents: tuple[Agent, Agent], tmp_path: Path
) -> None:
    """POST /v1/agents/{id}/logs: stored under the token's job in order (a resend skipped, a gap a
    409 naming the stored end); another instance or job is 403; a chunk too big is 422."""
    a, b = agents
    server, path = served.server, f"/v1/agents/{a.instance_id}/logs"
    plane = a.plane(served, tmp_path)
    chunk = LogChunk.of(b"hello\n", instance_id=a.instance_id, attempt_id="a-1", offset_bytes=0)
    plane.ship_log(chunk)  # no job named: the token's
    plane.ship_log(chunk)
    with pytest.raises(LogOffsetGap) as gap:
        plane.ship_log(dataclasses.replace(chunk, offset_bytes=100))
    assert gap.value.end_bytes == 6
    body = dataclasses.replace(chunk, offset_bytes=6).to_dict()
    assert server.call("POST", path, token=a.token, body=body)[:2] == (200, {"end_bytes": 12})
    refused = [
        server.call("POST", f"/v1/agents/{b.instance_id}/logs", token=a.token, body=body),
        server.call("POST", path, token=a.token, body={**body, "instance_id": b.instance_id}),
        server.call("POST", path, token=a.token, body={**body, "job_id": b.job_id}),
    ]
    assert [status for status, _, _ in refused] == [403] * 3, refused
    too_big = base64.b64encode(b"x" * (CHUNK_MAX_BYTES + 1)).decode()
    assert server.call("POST", path, token=a.token, body={**body, "data": too_big})[0] == 422
    with served.tokens.engine.connect() as conn:
        assert read_after(conn, a.job_id, "a-1") == (0, b"hello\nhello\n")
        assert read_after(conn, b.job_id, "a-1") == (0, b"")
