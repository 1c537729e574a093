"""Done when: the batch test with PostgreSQL as the job store and Redis as the shard queue.

The store is a fresh PostgreSQL schema (``search_path`` in the URL, so the
controller, the CLI and every agent's store process use it); the queue is the
Redis server, its keys deleted after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.jobs.e2e.conftest import Harness
from tests.jobs.e2e.test_batch import run_batch_with_preemptions


@pytest.fixture
def services(pg_schema: str, redis_prefix: str, harness: Harness) -> Iterator[Harness]:
    # Set up before the harness, so the controller is stopped before the schema is dropped.
    del redis_prefix  # its fixture proves Redis answers; the queue's keys are per job id
    separator = "&" if "?" in POSTGRES_URL else "?"
    harness.store_url = f"{POSTGRES_URL}{separator}options=-csearch_path%3D{pg_schema}"
    harness.extra_args = ("--queue-url", REDIS_URL)
    yield harness
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    with harness.store() as store:
        for job in store.list_jobs():
            keys = list(client.scan_iter(match=f"*{{{job.job_id}}}*", count=1000))
            if keys:
                client.delete(*keys)
    client.close()


def test_batch_job_on_postgresql_and_redis(services: Harness) -> None:
    run_batch_with_preemptions(services)
