"""Server mode: a replica's agents talk to ``spothop server`` over HTTP, each with a token of its own.

Real processes: ``spothop server run --no-controller`` (PostgreSQL schema,
Redis queue) and one replica (``spothop controller run --replica
--control-plane-url <server>``) on the same store; a batch job launched through
the API with a user token runs on the local cloud, one worker preempted. The
agents get ``SPOTHOP_CONTROL_PLANE=<server>`` and their own
``SPOTHOP_AGENT_TOKEN``: one token per instance, bound to its instance id,
revoked once its attempt ended and its instance is gone; no token appears in a
log, an event or a command line; every event the server acknowledged (all an
agent that finished its protocol logged) is stored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from spothop.jobs.launcher import AGENT_TOKEN_ENV, CONTROL_PLANE_ENV, WorkerCommand, bootstrap
from spothop.state.auth_tables import api_tokens
from spothop.state.tokens import TokenStore
from tests.conftest import REDIS_URL
from tests.jobs.e2e.conftest import Harness, running_harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.jobs.e2e.test_controller_restart import agent_up, check_story
from tests.jobs.test_replicas import schema_url
from tests.jobs.test_replicas_e2e import (
    LEAD_S,
    SLOW_TERMINATE,
    _delete_queue_keys,
    check_acknowledged_events,
)
from tests.server.live import LiveServer
from tests.waiting import scaled, wait_for

SHARDS = 120
TOKEN_PREFIX = "shp_a_"  # every agent token starts so (spothop.state.tokens)


def test_the_launcher_puts_the_token_in_the_environment_only(tmp_path: Path) -> None:
    boot = bootstrap(
        WorkerCommand(run="true"),
        job_id="j-000001",
        node=0,
        attempt_id="a-00000001",
        provider="aws-sim",
        store_url="postgresql://spothop:secret@db/spothop",
        home=tmp_path,
        control_plane="http://127.0.0.1:8350",
        agent_token="shp_a_0123_secret",
    )
    command = " ".join(boot.command)
    assert "shp_a_" not in command and "secret@db" not in command  # ps shows a command line
    assert "--control-plane http://127.0.0.1:8350" in command
    assert boot.env[AGENT_TOKEN_ENV] == "shp_a_0123_secret"
    assert boot.env[CONTROL_PLANE_ENV] == "http://127.0.0.1:8350"


@dataclass
class ServerMode:
    h: Harness
    server: LiveServer
    replica: subprocess.Popen[bytes]
    replica_log: Path
    tokens: TokenStore


@pytest.fixture
def server_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str, redis_prefix: str
) -> Iterator[ServerMode]:
    del redis_prefix
    with running_harness(tmp_path, monkeypatch, SLOW_TERMINATE, ("--queue-url", REDIS_URL)) as h:
        h.store_url = schema_url(pg_schema)
        server = LiveServer(
            h.store_url,
            tmp_path / "server.log",
            queue_url=REDIS_URL,
            extra_args=("--no-controller", "--access-log"),
        )
        replica_log = tmp_path / "replica.log"
        with server:
            with open(replica_log, "wb") as log:
                replica = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "spothop.cli.main",
                        "controller",
                        "run",
                        "--replica",
                        "--replica-id",
                        "r-tokens",
                        "--lease-s",
                        "5",
                        "--period",
                        "1",
                        "--store",
                        h.store_url,
                        "--queue-url",
                        REDIS_URL,
                        "--control-plane-url",
                        server.url,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Tokens revoked 3 s after their instance ended (120 by default).
                    env={**os.environ, "SPOTHOP_AGENT_TOKEN_GRACE_S": "3"},
                )
            tokens = TokenStore(h.store_url)
            try:
                yield ServerMode(h, server, replica, replica_log, tokens)
            finally:
                replica.send_signal(signal.SIGTERM)
                try:
                    replica.wait(scaled(30))
                except subprocess.TimeoutExpired:
                    replica.kill()
                    replica.wait()
                _delete_queue_keys(h)


def agent_tokens(tokens: TokenStore, job_id: str) -> list[dict[str, Any]]:
    c = api_tokens.c
    with tokens.engine.connect() as conn:
        rows = conn.execute(
            select(c.token_id, c.instance_id, c.revoked_unix_s, c.secret_hash, c.project).where(
                c.kind == "agent", c.job_id == job_id
            )
        ).mappings()
        return [dict(r) for r in rows]


def test_agents_talk_to_the_server_with_a_token_per_instance_revoked_when_it_ends(
    server_mode: ServerMode,
) -> None:
    m, h = server_mode, server_mode.h
    _, user_token = m.tokens.create_user("alice", "ml-team")
    spec = batch_spec(h.tmp, "tokens", shards=SHARDS)
    spec["workers"] = 2
    spec["envs"] = {"WORK_S_PER_SHARD": "0.05"}
    status, body, _ = m.server.call(
        "POST",
        "/v1/jobs",
        token=user_token,
        body=m.server.launch_body(user_token, spec, "tokens.yaml"),
    )
    assert status == 201, body
    job_id = str(body["job_id"])

    def two_running() -> list[Any] | None:
        running = h.running(job_id)
        return running if len(running) >= 2 else None

    workers = wait_for(two_running, 90, what="both workers running", interval_s=0.1)
    victim = workers[0]
    agent_up(h, victim)  # its self-check reached the store: through the server, with its token
    h.preempt(victim, lead_time_s=LEAD_S)  # 6 s of wall time for its protocol over HTTP

    final = h.wait_final(job_id, 120, what="the job to end")
    assert str(final.state) == "succeeded", final.reason
    wait_for(lambda: not h.alive(job_id), 30, what="every worker released")

    # One token per launched instance, bound to its id, in the job's project; none left live.
    with h.store() as store:
        attempts = store.attempts(job_id)
    launched = {a.instance_id for a in attempts if a.instance_id}
    assert victim.instance_id in launched and len(launched) >= 3  # a replacement ran
    wait_for(
        lambda: all(t["revoked_unix_s"] is not None for t in agent_tokens(m.tokens, job_id)),
        30,
        what="every agent token revoked once its instance ended",
    )
    issued = agent_tokens(m.tokens, job_id)
    bound = [t for t in issued if t["instance_id"] in launched]
    assert sorted(t["instance_id"] for t in bound) == sorted(launched)  # one each
    assert {t["project"] for t in issued} == {"ml-team"}
    assert all(t["secret_hash"].startswith("$argon2id$") for t in issued)

    # The agents talked HTTP: registered with the server, their events stored through it.
    access = m.server.log()
    assert "POST /v1/agents/register" in access
    assert f"POST /v1/agents/{victim.instance_id}/events" in access
    check_acknowledged_events(h, job_id, {victim.instance_id})
    check_exactly_once(h, job_id, h.tmp / "out-tokens", queue_url=REDIS_URL, shards=SHARDS)
    check_story(h, job_id)

    # No token in any log, event or agent state file of this home.
    leaks = [
        str(path)
        for path in [m.replica_log, m.server.log_path, *h.tmp.rglob("*")]
        if path.is_file()
        and path.suffix in ("", ".log", ".jsonl", ".json", ".txt")
        and TOKEN_PREFIX in path.read_text(errors="replace")
    ]
    assert leaks == []
    with h.store() as store:
        assert all(TOKEN_PREFIX not in str(e.data) for e in store.events(job_id))
