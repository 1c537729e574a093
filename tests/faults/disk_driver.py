"""Run in a mount namespace of its own by tests/faults/test_store_disk.py (never collected).

``python disk_driver.py DISK FAULT JOB_FILE PRICES``: a 2 MiB tmpfs mounted at DISK, a home on it
holding one job and the local cloud's store (made in one process), the FAULT made (``full``: a file fills the disk;
``read-only``: the disk remounted so), every command run as a user runs it (``main``, in a
process that opened no store before), the fault undone, and the store read and written again.
Prints one JSON line: the home, the job, each command's exit code, stdout and stderr.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import Any

DISK_SIZE = "2m"


def run_commands(commands: list[list[str]]) -> list[dict[str, Any]]:
    """Each command through ``main``, in this process (the child's side of :func:`spothop`)."""
    from spothop.cli.main import main

    results = []
    for args in commands:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
        results.append({"args": args, "code": code, "out": out.getvalue(), "err": err.getvalue()})
    return results


def spothop(*commands: list[str]) -> list[dict[str, Any]]:
    """The commands, run in a new process (as each `spothop` is), one after the other."""
    done = subprocess.run(
        [sys.executable, __file__, "--commands", json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def make_store() -> str:
    """The home's store with one job, and the local cloud's store (``cloud ls`` makes it)."""
    from spothop.db import default_database_url
    from spothop.jobs.spec import load_job
    from spothop.jobs.store import JobStore

    with JobStore(default_database_url()) as store:
        job_id = store.create_job(load_job({"name": "kept", "run": "true"}))
    (listed,) = run_commands([["cloud", "ls"]])
    assert listed["code"] == 0, listed
    return job_id


def fill(path: str) -> None:
    with open(path, "wb") as out:
        try:
            while True:
                out.write(bytes(65536))
                out.flush()
        except OSError:  # ENOSPC: the disk is full
            pass


def scenario(disk: str, fault: str, job_file: str, prices: str) -> dict[str, Any]:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", disk], check=True)
    home = os.path.join(disk, "home")
    os.mkdir(home, 0o700)
    os.environ.update({"SPOTHOP_HOME": home, "COLUMNS": "200"})
    os.environ.pop("SPOTHOP_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, __file__, "--make-store"], capture_output=True, text=True, check=True
    )
    job_id = done.stdout.strip().splitlines()[-1]
    filler = os.path.join(disk, "filler")
    if fault == "full":
        fill(filler)
    else:
        subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
    faulted = spothop(
        ["launch", job_file, "--detach"],
        ["cancel", job_id],
        ["jobs"],
        ["status", job_id],
        ["report", job_id],
        ["logs", job_id],
        ["db", "status"],
        ["market", "import", prices],
        ["cloud", "ls"],
    )
    if fault == "full":
        os.unlink(filler)
    else:
        subprocess.run(["mount", "-o", "remount,rw", disk], check=True)
    # The cancel starts the home's controller (and its agent API): stopped last, or they would
    # outlive the test in this mount namespace.
    *after, stopped = spothop(
        ["jobs", "--json"], ["cancel", job_id], ["status", job_id, "--json"], ["controller", "stop"]
    )
    assert stopped["code"] == 0, stopped
    return {"home": home, "job_id": job_id, "faulted": faulted, "after": after}


if __name__ == "__main__":
    if sys.argv[1] == "--commands":
        print(json.dumps(run_commands(json.loads(sys.argv[2]))))
    elif sys.argv[1] == "--make-store":
        print(make_store())
    else:
        print(json.dumps(scenario(*sys.argv[1:5])))
