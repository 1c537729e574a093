"""Queue backends for the conformance suite: SQLite, PostgreSQL and Redis, on real servers.

PostgreSQL is at ``SPOTHOP_TEST_POSTGRES_URL`` and Redis at
``SPOTHOP_TEST_REDIS_URL``. A server that does not answer skips its tests
with the reason, unless ``SPOTHOP_REQUIRE_SERVICES=1``, which makes it a
failure (CI sets it, so a missing service cannot pass unnoticed).

Each test gets its own PostgreSQL schema and Redis key prefix, removed after,
so parallel runs and leftovers of a killed run never collide.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spothop.queue import ShardQueue
from tests.conftest import POSTGRES_URL, REDIS_URL, unique

BACKENDS = ["sqlite", "postgresql", "redis"]


class FakeClock:
    """A clock the test moves by hand: leases expire without sleeping."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


QueueFactory = Callable[..., ShardQueue]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"


@pytest.fixture(params=BACKENDS)
def make_queue(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[QueueFactory]:
    """A factory of queues on one backend, all on the test's fake clock: ``make_queue(job=None)``."""
    opened: list[ShardQueue] = []
    backend = request.param
    if backend == "sqlite":
        from spothop.queue.sql_backend import SqlQueue

        url = request.getfixturevalue("sqlite_url")

        def make(job: str | None = None) -> ShardQueue:
            return SqlQueue(job or unique("job"), url, clock=clock)
    elif backend == "postgresql":
        from spothop.db import make_engine
        from spothop.queue.sql_backend import SqlQueue

        schema = request.getfixturevalue("pg_schema")
        engine = make_engine(POSTGRES_URL)

        def make(job: str | None = None) -> ShardQueue:
            return SqlQueue(job or unique("job"), engine=engine, schema=schema, clock=clock)
    else:
        from spothop.queue.redis_backend import RedisQueue

        prefix = request.getfixturevalue("redis_prefix")

        def make(job: str | None = None) -> ShardQueue:
            # No idle threshold: the fake clock, not real idle time, decides expiry here.
            return RedisQueue(
                job or unique("job"), REDIS_URL, prefix=prefix, clock=clock, reclaim_min_idle_ms=0
            )

    def tracked(job: str | None = None) -> ShardQueue:
        queue = make(job)
        opened.append(queue)
        return queue

    yield tracked
    for queue in opened:
        queue.close()
    if backend == "postgresql":
        engine.dispose()
