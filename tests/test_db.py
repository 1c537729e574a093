"""The engine factory's once-per-engine bookkeeping: a new database always gets its tables."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from spothop.db import make_engine, once_per_engine
from spothop.queue import Shard
from spothop.queue.sql_backend import SqlQueue


def test_a_new_engine_at_a_dropped_ones_address_still_gets_its_tables(tmp_path: Path) -> None:
    """CPython soon gives a new engine the id() of one just dropped. Keyed by id(), the bookkeeping took
    the new database for the old and skipped its tables (1 in ~10 fresh SQLite files failed here).

    The objects alive before the loop are frozen out of the collector's reach: late in a full run
    (torch, moto and thousands of tests loaded) each full collection scanned them all, 3 s apiece,
    136 s in all; frozen, each one scans only what the loop made, which is where the engines are."""
    gc.freeze()
    try:
        _drop_and_remake_engines(tmp_path)
    finally:
        gc.unfreeze()


def _drop_and_remake_engines(tmp_path: Path) -> None:
    for i in range(40):
        engine = make_engine(f"sqlite:///{tmp_path / f'q{i}.db'}")
        queue = SqlQueue("job", engine=engine)
        queue.enqueue([Shard("a", 1)])
        assert queue.stats().pending == 1
        engine.dispose()
        del queue, engine
        gc.collect()


def test_an_action_runs_once_per_engine_and_key(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    other = make_engine(f"sqlite:///{tmp_path / 'y.db'}")
    calls: list[str] = []
    for _ in range(3):
        once_per_engine(engine, "schema", lambda: calls.append("x"))
    once_per_engine(engine, ("schema", "s1"), lambda: calls.append("x/s1"))
    once_per_engine(other, "schema", lambda: calls.append("y"))
    assert calls == ["x", "x/s1", "y"]


def test_an_action_that_raises_runs_again_next_time(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the database was not there yet")

    with pytest.raises(OSError):
        once_per_engine(engine, "k", flaky)
    once_per_engine(engine, "k", flaky)
    once_per_engine(engine, "k", flaky)
    assert len(calls) == 2
