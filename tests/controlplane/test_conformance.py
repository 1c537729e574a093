"""One contract, every implementation: embedded (its store process) on SQLite and PostgreSQL, HTTP
against the tests' small server, and HTTP against `spothop server run` (a real uvicorn process)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from spothop.controlplane import (
    ControlPlane,
    EmbeddedControlPlane,
    Heartbeat,
    HttpControlPlane,
    QueueLeases,
    Registration,
    StoreControlPlane,
)
from spothop.db import shared_engine
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market.interruptions import InterruptionStore
from spothop.queue import Shard, open_queue
from spothop.state.agent_requests import add_request
from spothop.state.agent_tables import agent_events, agent_heartbeats
from spothop.state.worker_logs import read_after
from spothop.wire.errors import LogOffsetGap
from spothop.wire.events import (
    AdvanceNotice,
    Exited,
    FinalNotice,
    Interruption,
    WorkerStarted,
    event_from_dict,
)
from spothop.wire.group import Rendezvous, group_port
from spothop.wire.logs import LogChunk
from tests.conftest import POSTGRES_URL, unique
from tests.controlplane.control_server import ControlServer
from tests.server.live import LiveServer

TOKEN = "s3cret-token"
# In the server's environment too: its redaction of its own secrets must not mask a job's value.
HF_TOKEN_VALUE = "hf_also-in-the-servers-shell-0042"


@dataclass
class Case:
    plane: ControlPlane
    store_url: str  # where the events end, whichever way they went
    instance_id: str
    job_id: str  # this test's own: its queue's shards, its log, its agent token
    queue_url: str


def _queue(url: str, job_id: str) -> QueueLeases:
    with open_queue(url, job_id) as queue:
        queue.enqueue([Shard(f"s{i}", {"i": i}) for i in range(3)])
    return QueueLeases(url, job_id)


@dataclass
class Shared:
    """One ``spothop server run`` for the module's [server] cases: its store, queue and home.
    Each test brings its own instance, job and agent token, so none sees another's rows."""

    live: LiveServer
    store_url: str
    queue_url: str
    home: Path


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    tmp = tmp_path_factory.mktemp("conformance-server")
    home = tmp / "home"
    home.mkdir()
    store_url, queue_url = f"sqlite:///{tmp / 'store.db'}", f"sqlite:///{tmp / 'queue.db'}"
    env = {"HF_TOKEN": HF_TOKEN_VALUE, "SPOTHOP_HOME": str(home)}
    with LiveServer(store_url, tmp / "server.log", queue_url=queue_url, env=env) as live:
        yield Shared(live, store_url, queue_url, home)


@pytest.fixture(params=["embedded-sqlite", "embedded-postgres", "http", "server"])
def case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Case]:
    instance_id, job_id = unique("i"), unique("job")
    if request.param == "server":  # `spothop server run`, a real uvicorn process, its own token
        from spothop.state.tokens import TokenStore

        shared: Shared = request.getfixturevalue("shared_server")
        # Secrets are sealed here and opened there: both with the server's home's key.
        monkeypatch.setenv("SPOTHOP_HOME", str(shared.home))
        _queue(shared.queue_url, job_id)
        token = TokenStore(shared.store_url).issue_agent_token(job_id, instance_id)
        yield Case(
            HttpControlPlane(
                shared.live.url, instance_id, token=token, spool_dir=tmp_path / "agent"
            ),
            shared.store_url,
            instance_id,
            job_id,
            shared.queue_url,
        )
        return
    queue = _queue(f"sqlite:///{tmp_path / 'queue.db'}", job_id)
    if request.param == "embedded-postgres":
        schema = request.getfixturevalue("pg_schema")
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
        with EmbeddedControlPlane(
            url, instance_id, queue=queue
        ) as plane:  # its store process stops at close
            yield Case(plane, url, instance_id, job_id, queue.queue_url)
        return
    url = f"sqlite:///{tmp_path / 'store.db'}"
    if request.param == "embedded-sqlite":
        with EmbeddedControlPlane(url, instance_id, queue=queue) as plane:
            yield Case(plane, url, instance_id, job_id, queue.queue_url)
        return
    with ControlServer(url, token=TOKEN, queue=queue) as server:
        yield Case(
            HttpControlPlane(server.url, instance_id, token=TOKEN, spool_dir=tmp_path / "agent"),
            url,
            instance_id,
            job_id,
            queue.queue_url,
        )


def _interruption(instance_id: str) -> Interruption:
    return Interruption(
        instance_id=instance_id,
        provider="aws-sim",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="g5.xlarge",
        protocol="aws",
        notice_kind="final",
        cause="instance-action",
        notice_time_unix_s=1_800_000_000.0,
        lead_time_s=110.0,
        saved="saved",
        steps_s={"stop": 0.001},
    )


def test_an_event_recorded_twice_is_stored_once_as_its_model(case: Case) -> None:
    event = WorkerStarted(instance_id=case.instance_id, pid=42, command=("python", "train.py"))
    case.plane.record(event)
    case.plane.record(event)
    with shared_engine(case.store_url).connect() as conn:
        rows = conn.execute(
            select(agent_events).where(agent_events.c.instance_id == case.instance_id)
        ).all()
    assert len(rows) == 1 and rows[0].kind == "worker_started"
    import json

    assert event_from_dict(json.loads(rows[0].payload)) == event


def test_an_interruption_reaches_the_preemption_history_once(case: Case) -> None:
    event = _interruption(case.instance_id)
    case.plane.record(event)
    case.plane.record(event)
    got = [
        i
        for i in InterruptionStore(case.store_url).interruptions()
        if i.instance_id == case.instance_id
    ]
    assert [(i.market.provider, i.market.zone, i.lead_time_s, i.cause) for i in got] == [
        ("aws-sim", "us-east-1a", 110.0, "aws:instance-action")
    ]


def test_register_and_heartbeats_keep_one_row_per_instance(case: Case) -> None:
    case.plane.register(
        Registration(
            instance_id=case.instance_id,
            provider="aws-sim",
            worker_id="w",
            notice_blind=True,
            reasons=("metadata endpoint: refused",),
        )
    )
    case.plane.heartbeat(
        Heartbeat(case.instance_id, "w", 1_800_000_010.0, "running", 7, 0, None, False)
    )
    with shared_engine(case.store_url).connect() as conn:
        rows = conn.execute(
            select(agent_heartbeats).where(agent_heartbeats.c.instance_id == case.instance_id)
        ).all()
    assert [(r.state, r.worker_pid, r.notice_blind) for r in rows] == [("running", 7, False)]


def test_release_leases_puts_the_workers_shards_back(case: Case) -> None:
    with open_queue(case.queue_url, case.job_id) as queue:
        queue.claim("w-9", 2, lease_s=600)
        assert case.plane.release_leases("w-9") == 2
        assert queue.stats().leased == 0
    assert case.plane.release_leases("w-9") == 0


def test_requests_come_oldest_first_until_acknowledged(case: Case) -> None:
    engine = shared_engine(case.store_url)
    first = add_request(engine, case.instance_id, "checkpoint", "rebalance")
    second = add_request(engine, case.instance_id, "stop", "drain", deadline_unix_s=1_800_000_100.0)
    got = case.plane.requests()
    assert [(r.request_id, r.kind, r.reason) for r in got] == [
        (first, "checkpoint", "rebalance"),
        (second, "stop", "drain"),
    ]
    assert got[1].deadline_unix_s == 1_800_000_100.0
    case.plane.acknowledge(first)
    assert [r.request_id for r in case.plane.requests()] == [second]


def _chunk(case: Case, raw: bytes, offset_bytes: int) -> LogChunk:
    return LogChunk.of(
        raw,
        instance_id=case.instance_id,
        attempt_id="a-1",
        offset_bytes=offset_bytes,
        job_id=case.job_id,
    )


def _stored_log(case: Case) -> bytes:
    with shared_engine(case.store_url).connect() as conn:
        start, raw = read_after(conn, case.job_id, "a-1")
    assert start == 0
    return raw


def test_log_chunks_are_stored_in_order_and_a_resend_is_skipped(case: Case) -> None:
    case.plane.ship_log(_chunk(case, b"step 1\n", 0))
    case.plane.ship_log(_chunk(case, b"step 1\n", 0))  # a lost answer's resend: stored once
    case.plane.ship_log(_chunk(case, b"step 1\nstep 2\n", 0))  # a restarted agent: the new part
    case.plane.ship_log(_chunk(case, "ré".encode()[:2], 14))  # a character cut in two
    case.plane.ship_log(_chunk(case, "ré".encode()[2:] + b"\n", 16))
    assert _stored_log(case) == "step 1\nstep 2\nré\n".encode()


def test_a_log_chunk_past_the_stored_end_is_refused_with_the_end(case: Case) -> None:
    case.plane.ship_log(_chunk(case, b"abc", 0))
    with pytest.raises(LogOffsetGap) as refused:
        case.plane.ship_log(_chunk(case, b"xyz", 10))
    assert refused.value.end_bytes == 3 and "resend from byte 3" in str(refused.value)
    assert _stored_log(case) == b"abc"


def _group_node(
    store: JobStore, job_id: str, node: int, instance_id: str, generation: int = 0
) -> str:
    attempt = store.add_attempt(
        job_id,
        node,
        provider="aws-sim",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="g5.12xlarge",
        market_kind="spot",
        price_usd_per_hour=1.0,
        generation=generation,
        group_nnodes=2,
        group_nproc_per_node=4,
    )
    store.update_attempt(attempt.attempt_id, instance_id=instance_id, state=AttemptState.PENDING)
    return attempt.attempt_id


def _attempt_of(store: JobStore, job_id: str, instance_id: str) -> str:
    return next(a.attempt_id for a in store.attempts(job_id) if a.instance_id == instance_id)


def _registered(plane: ControlPlane, instance_id: str, address: str) -> None:
    plane.register(
        Registration(instance_id=instance_id, provider="aws-sim", private_address=address)
    )


def test_the_rendezvous_waits_for_every_nodes_address_then_names_node_0s(case: Case) -> None:
    """This instance is node 1 of a two-node group; node 0 registers through the store."""
    store = JobStore(case.store_url)
    try:
        job_id = store.create_job(load_job({"name": "g", "run": "true", "num_nodes": 2}))
        peer = unique("i")
        _group_node(store, job_id, 0, peer)
        lost = _group_node(store, job_id, 1, unique("i"))
        assert case.plane.rendezvous() is None  # this instance runs no attempt yet
        store.update_attempt(lost, state=AttemptState.ENDED, end_reason=EndReason.AGENT_LOST)
        _group_node(store, job_id, 1, case.instance_id)  # node 1, replaced within generation 0
        _registered(case.plane, case.instance_id, "10.0.0.12")
        assert case.plane.rendezvous() is None  # node 0 has not registered
        _registered(StoreControlPlane(case.store_url, peer), peer, "10.0.0.7")
        expected = Rendezvous(
            master_addr="10.0.0.7",
            master_port=group_port(job_id, 0),
            node_rank=1,
            nnodes=2,
            nproc_per_node=4,
            generation=0,
            node_addrs=("10.0.0.7", "10.0.0.12"),
        )
        assert case.plane.rendezvous() == expected
        assert expected.env()["SKYPILOT_NODE_IPS"] == "10.0.0.7\n10.0.0.12"
        # Node 0's worker finished first and its attempt ended: node 1 is not stranded.
        store.update_attempt(
            _attempt_of(store, job_id, peer),
            state=AttemptState.ENDED,
            end_reason=EndReason.SUCCEEDED,
        )
        assert case.plane.rendezvous() == expected
        # A newer generation launched: this one's nodes meet no more.
        _group_node(store, job_id, 0, unique("i"), generation=1)
        assert case.plane.rendezvous() is None
    finally:
        store.close()


def test_the_rendezvous_never_hands_out_a_node_that_is_leaving_or_lost(case: Case) -> None:
    """A generation meets only among nodes that are there: node 0 registered, then (each in a
    job of its own) was asked to stop, had its agent record a final or an advance notice, or was
    ended lost;
    node 1 (this instance) is answered nothing. A node whose agent exited 0 keeps its place."""
    store = JobStore(case.store_url)
    try:

        def group(*, node0_address: str = "10.0.0.7") -> tuple[str, str]:
            job_id = store.create_job(load_job({"name": "g", "run": "true", "num_nodes": 2}))
            peer = unique("i")
            _group_node(store, job_id, 0, peer)
            _group_node(store, job_id, 1, case.instance_id)
            _registered(StoreControlPlane(case.store_url, peer), peer, node0_address)
            _registered(case.plane, case.instance_id, "10.0.0.12")
            met = case.plane.rendezvous()
            assert met is not None and met.node_addrs == (node0_address, "10.0.0.12")
            return job_id, peer

        _, peer = group()
        add_request(store.engine, peer, "stop", "group stop: node 1 was lost")
        assert case.plane.rendezvous() is None

        job_id, peer = group()
        StoreControlPlane(case.store_url, peer).record(
            FinalNotice(instance_id=peer, job_id=job_id, protocol="aws", cause="instance-action")
        )
        assert case.plane.rendezvous() is None

        job_id, peer = group()
        StoreControlPlane(case.store_url, peer).record(
            AdvanceNotice(instance_id=peer, job_id=job_id, protocol="gcp", cause="maintenance")
        )
        assert case.plane.rendezvous() is None

        job_id, peer = group()
        store.update_attempt(
            _attempt_of(store, job_id, peer),
            state=AttemptState.ENDED,
            end_reason=EndReason.PREEMPTED,
        )
        assert case.plane.rendezvous() is None

        job_id, peer = group()
        StoreControlPlane(case.store_url, peer).record(
            Exited(instance_id=peer, job_id=job_id, code=0)
        )
        assert case.plane.rendezvous() is not None  # node 0 finished first: not stranded
    finally:
        store.close()


def test_an_instance_gets_its_jobs_secrets_while_its_attempt_is_live(case: Case) -> None:
    """The values come back opened; the store's file holds them only sealed."""
    store = JobStore(case.store_url)
    value = HF_TOKEN_VALUE
    try:
        spec = load_job(
            {"name": "s", "run": "true", "secrets": {"HF_TOKEN": None}}, secrets={"HF_TOKEN": value}
        )
        job_id = store.create_job(spec, secret_values=spec.secret_values)
        other = store.create_job(spec, secret_values={"HF_TOKEN": "another job's"})
        assert case.plane.secrets() == {}  # this instance runs no attempt yet
        attempt = _group_node(store, job_id, 0, case.instance_id)
        _group_node(store, other, 0, unique("i"))
        assert case.plane.secrets() == {"HF_TOKEN": value}
        store.update_attempt(attempt, state=AttemptState.ENDED, end_reason=EndReason.SUCCEEDED)
        assert case.plane.secrets() == {}  # an ended attempt's instance gets nothing
    finally:
        store.close()
    if case.store_url.startswith("sqlite:///"):
        stored = b"".join(
            p.read_bytes()
            for p in Path(case.store_url.removeprefix("sqlite:///")).parent.glob("store.db*")
        )
        assert b"HF_TOKEN" in stored and value.encode() not in stored
