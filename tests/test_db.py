"""The engine factory's table bookkeeping: a new database always gets its tables."""

from __future__ import annotations

import gc
from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, Table, inspect

from spothop.db import create_tables_once, make_engine
from spothop.queue import Shard
from spothop.queue.sql_backend import SqlQueue


def test_a_new_engine_at_a_dropped_ones_address_still_gets_its_tables(tmp_path: Path) -> None:
    """CPython soon gives a new engine the id() of one just dropped. Keyed by id(), the bookkeeping took
    the new database for the old and skipped its tables (1 in ~10 fresh SQLite files failed here)."""
    for i in range(40):
        engine = make_engine(f"sqlite:///{tmp_path / f'q{i}.db'}")
        queue = SqlQueue("job", engine=engine)
        queue.enqueue([Shard("a", 1)])
        assert queue.stats().pending == 1
        engine.dispose()
        del queue, engine
        gc.collect()


def test_tables_are_created_once_per_engine_and_schema(tmp_path: Path) -> None:
    metadata = MetaData()
    table = Table("t", metadata, Column("id", Integer, primary_key=True))
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    calls: list[str | None] = []

    def create() -> None:
        calls.append("created")
        metadata.create_all(engine)

    for _ in range(3):
        create_tables_once(engine, metadata, create)
    assert calls == ["created"] and inspect(engine).has_table(table.name)
    other = make_engine(f"sqlite:///{tmp_path / 'y.db'}")
    create_tables_once(other, metadata, lambda: calls.append("other"))
    assert calls == ["created", "other"]
