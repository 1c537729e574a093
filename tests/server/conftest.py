"""A real server for the package's tests: `spothop server run` on PostgreSQL (a fresh schema) with its
queue on Redis, fake cloud credentials in its environment, every request in its access log."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.state.tokens import TokenStore
from tests.conftest import (
    POSTGRES_URL,
    REDIS_URL,
    _redis_problem,
    fresh_schema,
    unavailable,
)
from tests.server.live import LiveServer

# What a cloud's SDK would read from the environment: none of it may reach a response or a log line.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKE1234",
    "AWS_SECRET_ACCESS_KEY": "fake/SecretAccessKey+DoNotLeak0123456789",
    "AWS_SESSION_TOKEN": "FakeSessionTokenDoNotLeak9876543210",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "FakeAliyunSecretDoNotLeak42",
    "CLOUDSDK_AUTH_ACCESS_TOKEN": "ya29.FakeGcpTokenDoNotLeak",
}
JOB_SPEC = "run: echo hello from {name}\nresources: {{accelerators: T4}}\n"


@dataclass
class Served:
    server: LiveServer
    tokens: TokenStore
    db_url: str
    queue_url: str
    home: Path


@contextlib.contextmanager
def serving(
    tmp_path_factory: pytest.TempPathFactory, extra_args: tuple[str, ...] = ()
) -> Iterator[Served]:
    """A server on a fresh PostgreSQL schema (dropped after) with its queue on Redis."""
    problem = _redis_problem()
    if problem:
        unavailable(problem)
    with fresh_schema("spothop_server") as schema:
        db_url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
        home = tmp_path_factory.mktemp("server-home")
        env = {"SPOTHOP_HOME": str(home), **FAKE_CREDENTIALS}
        server = LiveServer(
            db_url,
            home / "server.log",
            queue_url=REDIS_URL,
            env=env,
            extra_args=("--no-controller", "--access-log", *extra_args),
        )
        with server:
            yield Served(server, TokenStore(db_url), db_url, REDIS_URL, home)


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the package's modules (each test uses its own users, projects and agents)."""
    with serving(tmp_path_factory) as it:
        yield it


def launch(served: Served, token: str, name: str) -> str:
    status, body, _ = served.server.call(
        "POST",
        "/v1/jobs",
        token=token,
        body={"spec": JOB_SPEC.format(name=name), "filename": f"{name}.yaml"},
    )
    assert status == 201, body
    assert body["name"] == name and body["state"] == "pending"
    return str(body["job_id"])


def drop_redis_job(job: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"*{{{job}}}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
