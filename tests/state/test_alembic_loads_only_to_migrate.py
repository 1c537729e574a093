"""Alembic is loaded only to migrate: importing a table owner (the SQL queue, the market stores, the
command line) or opening a store already at the head does not import it (the agent opens the queue in
the middle of a preemption); the head that fast path trusts is Alembic's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from spothop.state.migrate import HEAD_REVISION, head_revision
from tests.waiting import scaled

OPEN = """
import json, sys
import spothop.cli.main, spothop.market.price_store, spothop.queue.sql_backend, spothop.state
imported = "alembic" in sys.modules
from spothop.queue import open_queue
open_queue(sys.argv[1], "job").close()
print(json.dumps([imported, "alembic" in sys.modules]))
"""


def _open_in_a_new_process(url: str) -> list[bool]:
    done = subprocess.run(
        [sys.executable, "-c", OPEN, url], capture_output=True, text=True, timeout=scaled(120)
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_alembic_is_imported_to_migrate_a_store_and_not_otherwise(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert _open_in_a_new_process(url) == [False, True]  # a new store: migrated
    assert _open_in_a_new_process(url) == [False, False]  # a current one: one SELECT


def test_the_head_the_fast_path_trusts_is_alembics() -> None:
    assert head_revision() == HEAD_REVISION, (
        "bump HEAD_REVISION in state/migrate.py with each migration"
    )
