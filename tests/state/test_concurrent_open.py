"""Processes opening one new store at the same moment: exactly one migrates, none fails, the schema is whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spothop.state.migrate import differences, head_revision, status
from tests.conftest import PROJECT_ROOT
from tests.state.conftest import StoreFactory
from tests.waiting import scaled, wait_for

OPENERS = 3
# Each child says it is ready, waits for the go file, then opens the store as spothop does.
CHILD = """
import json, sys, time
from pathlib import Path
from spothop.db import make_engine
from spothop.state.migrate import upgrade
url, schema, folder, index, timeout_s = sys.argv[1], sys.argv[2] or None, Path(sys.argv[3]), sys.argv[4], float(sys.argv[5])
engine = make_engine(url)
(folder / f"ready-{index}").touch()
deadline = time.monotonic() + timeout_s
while not (folder / "go").exists():
    if time.monotonic() > deadline:
        sys.exit("no go file")
    time.sleep(0.005)
done = upgrade(engine, schema)
print(json.dumps([a.revision for a in done.applied]))
"""


def test_processes_opening_a_new_store_at_once_migrate_it_once(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store(False)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
    timeout_s = scaled(60)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                store.url,
                store.schema or "",
                str(tmp_path),
                str(i),
                str(timeout_s),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(OPENERS)
    ]
    try:
        wait_for(
            lambda: all((tmp_path / f"ready-{i}").exists() for i in range(OPENERS)),
            60,
            what="every opener ready",
        )
        (tmp_path / "go").touch()
        results = [child.communicate(timeout=timeout_s) for child in children]
    finally:
        for child in children:
            child.kill()
    assert [child.returncode for child in children] == [0] * OPENERS, [err for _out, err in results]
    applied = sorted((json.loads(out) for out, _err in results), key=len)
    assert status(store.engine, store.schema).up_to_date
    assert applied[:-1] == [[]] * (OPENERS - 1)
    assert applied[-1][-1] == head_revision() and len(applied[-1]) >= 2
    assert differences(store.engine, store.schema) == []
