"""The embedded controller's agent API (create_agent_app on loopback, in a thread), driven by the real
HttpControlPlane and HttpQueue: registration, heartbeat, events; the shard queue through the control
plane on SQLite and on Redis (claim, heartbeat, complete, release, fail, fencing as the backend's,
403 for another job's queue or another instance's path)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from spothop.controlplane import Heartbeat, HttpControlPlane, Registration
from spothop.db import shared_engine
from spothop.errors import ConfigError
from spothop.queue import (
    AlreadyCompletedError,
    LeaseLost,
    QueueError,
    Shard,
    ShardState,
    open_queue,
)
from spothop.queue.http_backend import HttpQueue
from spothop.server.agent_serve import AgentApiServer, serve_agent_api
from spothop.state.agent_tables import agent_events, agent_heartbeats
from spothop.state.tokens import TokenStore
from spothop.wire.events import WorkerStarted
from tests.conftest import REDIS_URL, _redis_problem, unavailable, unique


@dataclass
class Api:
    server: AgentApiServer
    store_url: str
    queue_url: str
    tokens: TokenStore
    jobs: list[str]

    def agent(self, job: str | None = None) -> tuple[str, str, str]:
        """(job, instance, token): a token issued for the job's instance, as the executor does."""
        job, instance = job or unique("job"), unique("i")
        self.jobs.append(job)
        return job, instance, self.tokens.issue_agent_token(job, instance)

    def queue(self, job: str, instance: str, token: str) -> HttpQueue:
        return HttpQueue(job, self.server.url, token=token, instance_id=instance, attempts=2)


def _serve(tmp_path: Path, queue_url: str | None = None) -> Iterator[Api]:
    store_url = f"sqlite:///{tmp_path / 'spothop.db'}"
    server = serve_agent_api(None, store_url, queue_url or store_url)
    api = Api(server, store_url, queue_url or store_url, TokenStore(store_url), [])
    try:
        yield api
    finally:
        server.shutdown()
        for job in api.jobs:  # a Redis queue outlives the test's folder
            with open_queue(api.queue_url, job) as queue:
                queue.drop()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from _serve(tmp_path)


@pytest.fixture(params=["sqlite", "redis"])
def queue_api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    """The agent API over a SQLite store, its queue the store's tables or Redis."""
    if request.param == "redis":
        problem = _redis_problem()
        if problem:
            unavailable(problem)
        yield from _serve(tmp_path, REDIS_URL)
    else:
        yield from _serve(tmp_path)


def test_the_agent_api_listens_on_loopback_at_a_free_port(api: Api) -> None:
    assert api.server.url.startswith("http://127.0.0.1:")
    assert int(api.server.url.rsplit(":", 1)[1]) > 0


def test_a_port_in_use_is_one_line_naming_the_option(api: Api, tmp_path: Path) -> None:
    port = int(api.server.url.rsplit(":", 1)[1])
    with pytest.raises(ConfigError, match=r"^--agent-port \d+: cannot listen"):
        serve_agent_api(port, api.store_url, api.store_url)


def test_the_real_http_plane_registers_beats_and_records_events(api: Api, tmp_path: Path) -> None:
    job, instance, token = api.agent()
    plane = HttpControlPlane(
        api.server.url, instance, token=token, spool_dir=tmp_path / "spool", attempts=2
    )
    plane.register(
        Registration(instance_id=instance, provider="local", job_id=job, worker_id="w-1")
    )
    plane.heartbeat(Heartbeat(instance, "w-1", 1_800_000_000.0, "running", 7, 0, None, False))
    plane.record(WorkerStarted(instance_id=instance, job_id=job, worker_id="w-1", pid=7))
    engine = shared_engine(api.store_url)
    with engine.connect() as conn:
        beats = conn.execute(
            select(agent_heartbeats).where(agent_heartbeats.c.instance_id == instance)
        ).all()
        events = conn.execute(
            select(agent_events.c.kind).where(agent_events.c.instance_id == instance)
        ).all()
    assert [(b.job_id, b.worker_id) for b in beats] == [(job, "w-1")]
    assert [e.kind for e in events] == ["worker_started"]


def _enqueue(api: Api, job: str, n: int = 2) -> None:
    with open_queue(api.queue_url, job) as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(n)])


def test_claim_heartbeat_complete_release_and_fail_go_through_the_job_queue(
    queue_api: Api,
) -> None:
    job, instance, token = queue_api.agent()
    _enqueue(queue_api, job)
    queue = queue_api.queue(job, instance, token)
    first, second = queue.claim("w-1", 2, lease_s=30)
    assert {first.shard_id, second.shard_id} == {"s0", "s1"} and first.worker == "w-1"
    longer = queue.heartbeat(first, 60)
    assert longer.token == first.token and longer.expires_at > first.expires_at
    done = queue.complete(longer, "out/s0")
    assert done.first and done.output_ref == "out/s0"
    assert not queue.complete(longer, "out/s0").first  # a repeat: the same answer
    queue.release(second)
    assert queue.stats().pending == 1 and queue.stats().releases == 1
    (again,) = queue.claim("w-1", 1, lease_s=30)
    assert queue.fail(again, "boom") is ShardState.PENDING
    records = {r.id: r for r in queue.records()}
    assert records["s0"].state is ShardState.DONE and records["s1"].last_error == "boom"
    assert [r.id for r in queue.records(ShardState.DONE)] == ["s0"]


def test_fencing_is_the_backends_a_stale_token_fails_the_same_way(queue_api: Api) -> None:
    job, instance, token = queue_api.agent()
    _enqueue(queue_api, job, 1)
    queue = queue_api.queue(job, instance, token)
    (lease,) = queue.claim("w-1", 1, lease_s=30)
    queue.release(lease)
    (newer,) = queue.claim("w-2", 1, lease_s=30)
    with open_queue(queue_api.queue_url, job) as direct, pytest.raises(LeaseLost) as directly:
        direct.complete(lease, "stale")
    with pytest.raises(LeaseLost) as through:
        queue.complete(lease, "stale")
    assert str(through.value) == str(directly.value)
    assert (through.value.shard_id, through.value.token) == ("s0", lease.token)
    with pytest.raises(LeaseLost):
        queue.heartbeat(lease)
    queue.complete(newer, "good")
    with pytest.raises(AlreadyCompletedError):
        queue.complete(newer, "other")


def test_a_token_reaches_its_own_jobs_queue_only(queue_api: Api) -> None:
    job_a, instance_a, token_a = queue_api.agent()
    job_b, instance_b, _token_b = queue_api.agent()
    _enqueue(queue_api, job_b, 1)
    with pytest.raises(QueueError, match=r"refused the token .*this token is for job"):
        queue_api.queue(job_b, instance_a, token_a).claim("w-1")
    with pytest.raises(QueueError, match="refused the token"):
        queue_api.queue(job_a, instance_b, token_a).stats()  # another instance's path
    with pytest.raises(QueueError, match="refused the token"):
        queue_api.queue(job_a, instance_a, "not-a-token").stats()
    with open_queue(queue_api.queue_url, job_b) as direct:
        assert direct.stats().pending == 1  # nothing of job B was touched


def test_a_lease_of_another_job_is_refused(queue_api: Api) -> None:
    job_a, instance_a, token_a = queue_api.agent()
    job_b, instance_b, token_b = queue_api.agent()
    _enqueue(queue_api, job_b, 1)
    (lease,) = queue_api.queue(job_b, instance_b, token_b).claim("w-b", 1, 30)
    with pytest.raises(QueueError, match="refused the token"):
        queue_api.queue(job_a, instance_a, token_a).complete(lease, "stolen")


def test_what_a_worker_does_not_do_is_refused_in_one_line(api: Api) -> None:
    job, instance, token = api.agent()
    with pytest.raises(QueueError, match="not offered through the control plane"):
        api.queue(job, instance, token).enqueue([Shard("x", 1)])


def test_an_unreachable_control_plane_is_queue_unavailable(tmp_path: Path) -> None:
    from spothop.queue import QueueUnavailableError

    queue = HttpQueue("j", "http://127.0.0.1:9", token="t", instance_id="i", attempts=2)
    with pytest.raises(QueueUnavailableError, match="did not answer claim"):
        queue.claim("w")


def test_open_queue_takes_an_http_url_with_the_token_and_instance_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPOTHOP_AGENT_TOKEN", raising=False)
    monkeypatch.setenv("SPOTHOP_INSTANCE_ID", "i-1")
    with pytest.raises(ConfigError, match=r"needs \$SPOTHOP_AGENT_TOKEN"):
        open_queue("http://127.0.0.1:1", "job")
    monkeypatch.setenv("SPOTHOP_AGENT_TOKEN", "tok")
    queue = open_queue("http://127.0.0.1:1/", "job")
    assert isinstance(queue, HttpQueue) and queue.instance_id == "i-1"
    assert queue.base_url == "http://127.0.0.1:1"
