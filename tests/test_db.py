"""The engine factory: a new database always gets its tables, and a new SQLite file opened by
several processes at once opens in every one of them."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spothop.db import make_engine, once_per_engine
from spothop.queue import Shard
from spothop.queue.sql_backend import SqlQueue
from tests.conftest import PROJECT_ROOT
from tests.waiting import scaled

OPENERS = 4
ROUNDS = 8
# Each child opens file round-r.db at start + r * 0.25 s, as every other child does: the files are
# new, so the openers race to switch each one to WAL.
OPENER = """
import sys, time
from pathlib import Path
from sqlalchemy import text
from spothop.db import make_engine
folder, start, rounds = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
for r in range(rounds):
    engine = make_engine(f"sqlite:///{folder / f'round-{r}.db'}")
    while time.time() < start + r * 0.25:
        pass
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    engine.dispose()
"""


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


def test_processes_opening_new_sqlite_files_together_all_open_them(tmp_path: Path) -> None:
    """Switching a new file to WAL once failed with "database is locked" in 1 of 4 racing openers:
    SQLite skips its busy handler there. Every opener of every round must now get in."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
    # Far enough ahead that every child has imported SQLAlchemy before the first round.
    start = time.time() + scaled(3)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(tmp_path), str(start), str(ROUNDS)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(OPENERS)
    ]
    errors = [child.communicate(timeout=scaled(60))[1] for child in children]
    assert [child.returncode for child in children] == [0] * OPENERS, errors
    for r in range(ROUNDS):
        engine = make_engine(f"sqlite:///{tmp_path / f'round-{r}.db'}")
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == OPENERS
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        engine.dispose()
