"""Fixtures every test shares: an isolated SPOTHOP_HOME and the shared real-world data."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# pytest-xdist gives its workers the terminal's width as COLUMNS (80 without a terminal), which
# would squeeze the CLI's tables and error lines as a plain run never does: a worker sees what a
# plain run sees.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

# Real traces, prices, catalogs and nvidia-smi outputs are read in place from
# ../shared/data (never copied into the project); SPOTHOP_SHARED_DATA points elsewhere.
SHARED_DATA = Path(
    os.environ.get("SPOTHOP_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data")
).resolve()


def shared_path(*parts: str) -> Path:
    """A path under the shared data; the calling test is skipped if it is not there."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data {path} not present (set SPOTHOP_SHARED_DATA)")
    return path


def slow_selected(config: pytest.Config) -> bool:
    """Whether this run asked for the slow tests (``-m slow``, or an expression naming it)."""
    return "slow" in str(config.getoption("-m") or "")


# The real-process end-to-end tests (controllers, agents, instances, workers as processes of their
# own, killed with real signals): marked ``e2e`` here by where they live, so that ``make
# test-stress`` can repeat exactly them under load (`-m e2e`).
E2E_PATHS = (
    "tests/e2e/",
    "tests/jobs/e2e/",
    "tests/agent/test_e2e",
    "tests/examples/test_embed.py",
    "tests/examples/test_finetune.py",
)


def is_e2e(item: pytest.Item) -> bool:
    """Whether ``item`` is one of the real-process end-to-end tests (:data:`E2E_PATHS`)."""
    where = Path(str(item.path)).resolve().relative_to(PROJECT_ROOT).as_posix()
    return where.startswith(E2E_PATHS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are skipped unless ``-m`` names them: the marker alone kept nothing
    out of ``make test``, so the three data-parallel tests marked slow ran there anyway. The
    real-process end-to-end tests get the ``e2e`` marker (:data:`E2E_PATHS`)."""
    for item in items:
        if is_e2e(item):
            item.add_marker(pytest.mark.e2e)
    if slow_selected(config):
        return
    skip = pytest.mark.skip(reason="marked slow, out of the default suite: select it with -m slow")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Each test gets its own SPOTHOP_HOME, so no test reads or writes a user's files."""
    home = tmp_path_factory.mktemp("spothop-home")
    monkeypatch.setenv("SPOTHOP_HOME", str(home))
    monkeypatch.delenv("SPOTHOP_FX_RATES", raising=False)
    return home


@pytest.fixture
def spothop_home(_isolated_home: Path) -> Path:
    return _isolated_home


# -- the services: real PostgreSQL and Redis ------------------------------------
#
# A server that does not answer skips its tests with the reason, unless
# SPOTHOP_REQUIRE_SERVICES=1 (as .ci/run sets), which makes it a failure.

POSTGRES_URL = os.environ.get(
    "SPOTHOP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("SPOTHOP_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
REQUIRE_SERVICES = os.environ.get("SPOTHOP_REQUIRE_SERVICES") == "1"
CONNECT_TIMEOUT_S = 3


def unavailable(reason: str) -> None:
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} (SPOTHOP_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@cache
def _postgres_problem() -> str | None:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {POSTGRES_URL} unreachable: {exc}"
    return None


@cache
def _redis_problem() -> str | None:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=CONNECT_TIMEOUT_S).ping()
    except Exception as exc:
        return f"Redis at {REDIS_URL} unreachable: {exc}"
    return None


def unique(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def fresh_schema(prefix: str = "spothop_test") -> Iterator[str]:
    """A fresh PostgreSQL schema named after ``prefix``, dropped after (whatever happened)."""
    problem = _postgres_problem()
    if problem:
        unavailable(problem)
    import psycopg

    schema = unique(prefix).replace("-", "_")
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test, dropped after it."""
    with fresh_schema() as schema:
        yield schema


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A fresh Redis key prefix for one test; its keys are deleted after it."""
    problem = _redis_problem()
    if problem:
        unavailable(problem)
    import redis

    prefix = unique("spothop-test") + ":"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()
