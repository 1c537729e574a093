"""Importing a table owner (the SQL queue, the market stores, the command line) does not load Alembic:
only opening a store does, once per process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.waiting import scaled

CHECK = """
import sys
import spothop.cli.main, spothop.market.price_store, spothop.queue.sql_backend, spothop.state
assert "alembic" not in sys.modules, "imported alembic"
from spothop.db import make_engine
from spothop.state import ensure_schema
ensure_schema(make_engine(sys.argv[1]))
assert "alembic" in sys.modules
"""


def test_alembic_is_imported_when_a_store_is_opened_not_before(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, f"sqlite:///{tmp_path / 's.db'}"],
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 0, done.stderr
