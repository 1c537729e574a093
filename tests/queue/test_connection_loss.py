"""Lost connections and a Redis restart: operations retry with backoff and nothing acknowledged is lost."""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import event

from spothop.db import make_engine
from spothop.errors import ConfigError
from spothop.queue import QueueUnavailableError, Shard, ShardState
from spothop.queue.redis_backend import RedisQueue, wait_for_redis
from spothop.queue.retry import RETRY_BUDGET_ENV, with_retry
from spothop.queue.sql_backend import SqlQueue
from tests.conftest import POSTGRES_URL, REDIS_URL, unique

LEASE_S = 60.0
SERVER_START_TIMEOUT_S = 10.0


def test_retry_rides_out_transient_errors_then_gives_up() -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise redis.ConnectionError("connection reset")
        return "ok"

    assert with_retry(flaky, (redis.ConnectionError,), "test", sleep=lambda _s: None) == "ok"
    assert len(calls) == 3

    def down() -> str:
        raise redis.ConnectionError("refused")

    with pytest.raises(QueueUnavailableError, match="unreachable after 4 tries"):
        with_retry(down, (redis.ConnectionError,), "test", attempts=4, sleep=lambda _s: None)


def test_the_retry_budget_variable_bounds_the_waits_and_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def down() -> str:
        raise redis.ConnectionError("refused")

    waits: list[float] = []
    monkeypatch.setenv(RETRY_BUDGET_ENV, "0.4")  # 0.05 + 0.1 + 0.2; the next 0.4 would pass it
    with pytest.raises(QueueUnavailableError, match="unreachable after 4 tries"):
        with_retry(down, (redis.ConnectionError,), "test", sleep=waits.append)
    assert waits == [0.05, 0.1, 0.2]
    monkeypatch.setenv(RETRY_BUDGET_ENV, "60")  # longer than the default 8 tries (~5 s)
    waits.clear()
    with pytest.raises(QueueUnavailableError):
        with_retry(down, (redis.ConnectionError,), "test", sleep=waits.append)
    assert len(waits) > 8 and sum(waits) <= 60
    for bad in ("soon", "-1", "nan", "7200"):
        monkeypatch.setenv(RETRY_BUDGET_ENV, bad)
        with pytest.raises(ConfigError, match=re.escape(f"${RETRY_BUDGET_ENV}")):
            with_retry(down, (redis.ConnectionError,), "test", sleep=waits.append)


def test_redis_client_kill_mid_run(redis_prefix: str) -> None:
    name = unique("spothop-killme")
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True, client_name=name)
    queue = RedisQueue(unique("job"), prefix=redis_prefix, client=client)
    queue.enqueue([Shard(f"s{i}", i) for i in range(4)])
    leases = queue.claim("w1", n=4, lease_s=LEASE_S)
    admin = redis.Redis.from_url(REDIS_URL)
    killed = 0
    for entry in admin.client_list():
        if entry.get("name") == name:
            admin.execute_command("CLIENT", "KILL", "ID", entry["id"])
            killed += 1
    assert killed >= 1
    for lease in leases:
        assert queue.complete(lease, f"ref-{lease.shard_id}").first
    assert queue.stats().done == 4
    client.close()
    admin.close()


def test_postgres_backend_terminated_mid_transaction(pg_schema: str) -> None:
    import psycopg

    engine = make_engine(POSTGRES_URL)
    queue = SqlQueue(unique("job"), engine=engine, schema=pg_schema)
    queue.enqueue([Shard("s0", 0)])
    (lease,) = queue.claim("w1", lease_s=LEASE_S)
    terminated: list[int] = []

    def kill_own_session(conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE") and not terminated:
            pid = conn.connection.dbapi_connection.info.backend_pid
            with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            terminated.append(pid)

    event.listen(engine, "before_cursor_execute", kill_own_session)
    done = queue.complete(lease, "ref-s0")
    event.remove(engine, "before_cursor_execute", kill_own_session)
    assert terminated, "the session was never terminated: the test did not test anything"
    assert done.first
    assert queue.get("s0").state == ShardState.DONE
    engine.dispose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OwnRedis:
    """A throwaway redis-server with AOF fsync on every write, restartable; never the shared one."""

    def __init__(self, folder: Path) -> None:
        self.port = _free_port()
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def crash(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not on PATH: the restart test needs a server of its own")
    server = OwnRedis(tmp_path)
    server.start()
    yield server
    if server.proc and server.proc.poll() is None:
        server.crash()


def test_redis_crash_and_restart_loses_no_acknowledged_shard(own_redis: OwnRedis) -> None:
    client = redis.Redis(port=own_redis.port, decode_responses=True)
    assert wait_for_redis(client, SERVER_START_TIMEOUT_S)
    queue = RedisQueue("restart", client=client)
    assert queue.durability() == {"appendonly": "yes", "appendfsync": "always"}
    queue.enqueue([Shard(f"s{i:02d}", i) for i in range(20)])
    leases = queue.claim("w1", n=20, lease_s=LEASE_S)
    for lease in leases[:10]:
        queue.complete(lease, f"ref-{lease.shard_id}")
    own_redis.crash()
    restarter = threading.Timer(0.3, own_redis.start)
    restarter.start()
    # This complete starts while Redis is down: it must retry until it is back.
    assert queue.complete(leases[10], f"ref-{leases[10].shard_id}").first
    restarter.join()
    done = {r.id for r in queue.records(ShardState.DONE)}
    assert done == {lease.shard_id for lease in leases[:11]}
    stats = queue.stats()
    assert (stats.done, stats.leased, stats.pending) == (11, 9, 0)
    for lease in leases[11:]:
        assert queue.complete(lease, "ref").first
    assert queue.stats().done == 20
    client.close()
