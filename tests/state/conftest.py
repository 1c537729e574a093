"""Stores for the state tests: empty, or made by spothop 0.1.0 (from the SQL dumps in ``fixtures/``), on
SQLite and on a fresh PostgreSQL schema."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from spothop.db import make_engine
from tests.conftest import POSTGRES_URL

FIXTURES = Path(__file__).with_name("fixtures")
RELEASE_0_1_SQLITE = FIXTURES / "release-0.1.0-sqlite.sql"
RELEASE_0_1_POSTGRESQL = FIXTURES / "release-0.1.0-postgresql.sql"
RELEASE_0_1_TABLES = (
    "market_prices",
    "market_interruptions",
    "market_exposure",
    "queue_jobs",
    "queue_shards",
)
DATABASES = ["sqlite", "postgresql"]


@dataclass
class Store:
    """One store under test: its engine, its PostgreSQL schema (None on SQLite), its URL."""

    engine: Engine
    schema: str | None
    url: str

    def qualified(self, table: str) -> str:
        return f'"{self.schema}".{table}' if self.schema else table

    def rows(self, table: str, order_by: str) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            result = conn.execute(
                text(f"SELECT * FROM {self.qualified(table)} ORDER BY {order_by}")
            )
            return [dict(row._mapping) for row in result]

    def tables(self) -> set[str]:
        from sqlalchemy import inspect

        with self.engine.connect() as conn:
            return set(inspect(conn).get_table_names(schema=self.schema))

    def reader(self) -> Engine:
        """An engine whose unqualified names are this store's tables (for spothop's own stores)."""
        if self.schema is None:
            return self.engine
        return make_engine(POSTGRES_URL, connect_args={"options": f"-csearch_path={self.schema}"})


StoreFactory = Callable[[bool], Store]


@pytest.fixture(params=DATABASES)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """``make_store(release_0_1)``: an empty store, or one holding what spothop 0.1.0 wrote."""
    engines: list[Engine] = []

    def make(release_0_1: bool) -> Store:
        if request.param == "sqlite":
            path = tmp_path / f"spothop-{len(engines)}.db"
            if release_0_1:
                conn = sqlite3.connect(path)
                conn.executescript(RELEASE_0_1_SQLITE.read_text())
                conn.close()
            url = f"sqlite:///{path}"
            store = Store(make_engine(url), None, url)
        else:
            schema = request.getfixturevalue("pg_schema")
            if release_0_1:
                import psycopg

                with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                    conn.execute(
                        RELEASE_0_1_POSTGRESQL.read_text().replace("{schema}", f'"{schema}"')
                    )
            store = Store(make_engine(POSTGRES_URL), schema, POSTGRES_URL)
        engines.append(store.engine)
        return store

    yield make
    for engine in engines:
        engine.dispose()
