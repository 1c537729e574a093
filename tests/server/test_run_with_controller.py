"""`spothop server run` with its controller replica (the default): a user launches a batch job through
the API; the replica beside the API claims it, its agents talk to this same server over HTTP with their
own tokens, the job succeeds with every shard done once; on SIGTERM the replica lets go of its leases."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.store import JobStore
from spothop.server.controller import controller_pids
from spothop.state.job_tables import jobs
from spothop.state.tokens import TokenStore
from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.jobs.e2e.conftest import WORLD, running_harness
from tests.jobs.e2e.test_batch import batch_spec, check_exactly_once
from tests.server.conftest import drop_redis_job
from tests.server.live import LiveServer
from tests.waiting import process_running, wait_for

SHARDS = 6


def test_the_servers_own_replica_runs_a_job_whose_agents_call_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str, redis_prefix: str
) -> None:
    del redis_prefix
    store_url = f"{POSTGRES_URL}?options=-csearch_path%3D{pg_schema}"
    with running_harness(tmp_path, monkeypatch, WORLD) as h:
        server = LiveServer(
            store_url,
            tmp_path / "server.log",
            queue_url=REDIS_URL,
            extra_args=("--lease-s", "5", "--access-log", "--replica-id", "r-one"),
        )
        job_id = ""
        try:
            with server:
                _, token = TokenStore(store_url).create_user("ada", "vision")
                spec = {**batch_spec(tmp_path, "served", shards=SHARDS), "workers": 2}
                status, body, _ = server.call(
                    "POST",
                    "/v1/jobs",
                    token=token,
                    body=server.launch_body(token, spec, "served.yaml"),
                )
                assert status == 201, body
                job_id = body["job_id"]

                def final() -> str | None:
                    state = server.call("GET", f"/v1/jobs/{job_id}", token=token)[1]["state"]
                    return state if state in ("succeeded", "failed", "cancelled") else None

                assert wait_for(final, 150, what="the job to end", interval_s=0.5) == "succeeded"
                log = server.log()
                assert "POST /v1/agents/register" in log and "/heartbeat" in log
                assert f"controller replica r-one: agents call {server.url}" in log
                with JobStore(store_url) as store:
                    assert store.get_job(job_id).lease_owner in ("r-one", None)

                    def instances_ended() -> bool:
                        return all(a.state is AttemptState.ENDED for a in store.attempts(job_id))

                    wait_for(instances_ended, 60, what="every attempt ended", interval_s=0.2)
            check_exactly_once(
                h, job_id, tmp_path / "out-served", queue_url=REDIS_URL, shards=SHARDS
            )
            with JobStore(store_url) as store, store.engine.connect() as conn:
                owner = conn.execute(select(jobs.c.lease_owner).where(jobs.c.job_id == job_id))
                assert owner.scalar() is None  # SIGTERM: the replica let go of the finished job
        finally:
            if job_id:
                drop_redis_job(job_id)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_controller_process_is_restarted_when_it_dies_and_dies_with_its_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_schema: str, redis_prefix: str
) -> None:
    del redis_prefix
    store_url = f"{POSTGRES_URL}?options=-csearch_path%3D{pg_schema}"
    with running_harness(tmp_path, monkeypatch, WORLD):
        server = LiveServer(
            store_url,
            tmp_path / "server.log",
            queue_url=REDIS_URL,
            extra_args=("--lease-s", "3", "--replica-id", "r-unit"),
        )
        with server:
            assert server.process is not None
            pid = server.process.pid
            first = wait_for(lambda: controller_pids(pid), 60, what="the controller process")
            assert len(first) == 1
            os.kill(first[0], signal.SIGKILL)
            again = wait_for(
                lambda: [c for c in controller_pids(pid) if c not in first],
                30,
                what="the controller process started again",
            )
            assert "the controller replica exited with -9; starting it again" in server.log()
            server.process.kill()  # the whole replica, as the bench's fault: no SIGTERM
            server.process.wait()
            wait_for(
                lambda: not process_running(again[0]),
                10,
                what="the controller to die with its server",
            )
