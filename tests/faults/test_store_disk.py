"""The store on a full disk and on a read-only one: every command is one line naming the file and
the fix (exit 4), never a traceback, and nothing already saved is lost.

A real disk: a small tmpfs, filled or remounted read-only, in a mount namespace of its own
(``unshare --mount``: the mounts are the test's only and go with it). Where this machine cannot
make one (no ``unshare``, no right to mount), the tests skip with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

DRIVER = Path(__file__).with_name("disk_driver.py")
PRICES = (
    "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice\n"
    "2025-01-01T00:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.91\n"
)


def _mounts_problem(tmp_path: Path) -> str | None:
    """Why no disk can be made here (None: it can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "no unshare or mount command on this machine"
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "--mount", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"cannot mount a tmpfs in a mount namespace: {done.stderr.strip()}"
    return None


def _run(tmp_path: Path, fault: str) -> dict[str, Any]:
    problem = _mounts_problem(tmp_path)
    if problem:
        pytest.skip(problem)
    disk = tmp_path / "disk"
    disk.mkdir()
    job = tmp_path / "job.yaml"
    job.write_text("name: new\nrun: echo hi\n")
    prices = tmp_path / "prices.csv"
    prices.write_text(PRICES)
    args = [str(disk), fault, str(job), str(prices)]
    done = subprocess.run(
        ["unshare", "--mount", sys.executable, str(DRIVER), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("fault", "said"), [("full", "is full"), ("read-only", "read-only")], ids=["full", "read-only"]
)
def test_a_store_on_a_full_or_read_only_disk_is_one_line_naming_it_and_loses_nothing(
    tmp_path: Path, fault: str, said: str
) -> None:
    ran = _run(tmp_path, fault)
    home = ran["home"]
    for result in ran["faulted"]:
        # launch's note of the file's dialect aside (it is read before anything is stored)
        lines = [x for x in result["err"].strip().splitlines() if "read as a spothop job" not in x]
        shown = f"{result['args']}: {result['err']}"
        assert result["code"] == 4, shown
        assert "Traceback" not in result["err"] and len(lines) == 1, shown
        line = lines[-1]
        assert line.startswith("error: ") and home in line and said in line, shown
        assert "then run the command again" in line, shown  # the fix
    listed, cancelled, status = ran["after"]
    assert listed["code"] == 0 and [j["job_id"] for j in json.loads(listed["out"])] == [
        ran["job_id"]
    ]
    assert cancelled["code"] == 0, cancelled  # the store takes writes again
    assert json.loads(status["out"])["job_id"] == ran["job_id"]


def test_a_read_only_postgresql_store_is_one_line_naming_it_and_loses_nothing(
    pg_schema: str, cli: Any, tmp_path: Path
) -> None:
    """PostgreSQL read-only (a standby; here ``default_transaction_read_only``) refuses every
    write: one line naming the database and the fix, and what was stored reads back."""
    from spothop.jobs.spec import load_job
    from spothop.jobs.store import JobStore
    from tests.conftest import POSTGRES_URL

    url = f"{POSTGRES_URL}?options=-csearch_path%3D{pg_schema}"
    with JobStore(url) as store:
        job_id = store.create_job(load_job({"name": "kept", "run": "true"}))
    read_only = f"{url}%20-cdefault_transaction_read_only%3Don"
    job = tmp_path / "job.yaml"
    job.write_text("name: new\nrun: echo hi\n")
    for args in (["cancel", job_id], ["launch", str(job), "--detach"]):
        result = cli(*args, "--store", read_only)
        errors = [x for x in result.err.splitlines() if "read as a spothop job" not in x]
        assert result.code == 4 and len(errors) == 1, (args, result.err)
        assert "is read-only" in errors[0] and "127.0.0.1" in errors[0], errors
    with JobStore(url) as store:
        assert [j.job_id for j in store.list_jobs()] == [job_id]
