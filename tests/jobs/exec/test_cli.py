"""The job CLI: launch --detach --json, one controller per home, status/jobs/logs/cancel and their errors."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spothop.cli.main import main
from spothop.jobs.controller import daemon
from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from tests.waiting import process_running, wait_for


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def test_launch_detached_prints_the_job_id_and_starts_one_controller(
    tmp_path: Path, store_url: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "hello", "run": "echo hi"}))
    try:
        code, out, err = run("launch", str(job), "--detach", "--json", "--store", store_url)
        assert code == 0, err
        job_id = json.loads(out)["job_id"]
        assert job_id.startswith("j-")
        info = daemon.status()
        assert info is not None and process_running(info.pid) and info.store_url == store_url
        # A second controller on the same home says which one runs.
        second = subprocess.run(
            [sys.executable, "-m", "spothop.cli.main", "controller", "run", "--store", store_url],
            capture_output=True,
            text=True,
            env=os.environ,
            timeout=60,
        )
        assert second.returncode == 1
        assert f"pid {info.pid}" in second.stderr and "Traceback" not in second.stderr
        code, out, _ = run("controller", "status", "--json")
        assert code == 0 and json.loads(out)["pid"] == info.pid
        code, out, _ = run("status", job_id, "--json", "--store", store_url)
        data = json.loads(out)
        assert (
            code == 0 and data["job_id"] == job_id and data["state"] in {s.value for s in JobState}
        )
        assert {"interruptions", "instances", "events"} <= set(data)
        assert data["events"][0]["kind"] == "created"
        code, out, _ = run("jobs", "--json", "--store", store_url)
        assert code == 0 and [j["job_id"] for j in json.loads(out)] == [job_id]
    finally:
        stopped = daemon.stop()
    assert stopped is not None
    wait_for(lambda: not process_running(stopped.pid), 20, what="the controller's exit")
    assert daemon.status() is None


def test_cancelling_a_finished_job_says_it_is_finished(store_url: str) -> None:
    with JobStore(store_url) as store:
        job_id = store.create_job(load_job({"name": "done", "run": "true"}))
        store.transition(job_id, JobState.CANCELLED, "job_cancelled")
    code, _, err = run("cancel", job_id, "--store", store_url)
    assert code == 1
    assert "already cancelled" in err and "Traceback" not in err


def test_an_unknown_job_is_not_found(store_url: str) -> None:
    for command in (["status", "j-000000"], ["logs", "j-000000"], ["cancel", "j-000000"]):
        code, _, err = run(*command, "--store", store_url)
        assert code == 3, (command, err)
        assert "j-000000" in err


def test_a_bad_job_file_is_refused_before_anything_starts(tmp_path: Path, store_url: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "bad", "run": "true", "resources": {"gpu": "H1000"}}))
    code, _, err = run("launch", str(job), "--detach", "--store", store_url)
    assert code == 2 and "H1000" in err
    assert daemon.status() is None


def test_a_spec_no_offering_satisfies_is_refused_naming_the_requirement(
    tmp_path: Path, store_url: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump({"name": "huge", "run": "true", "resources": {"min_gpu_memory_gib": 4000}})
    )
    code, _, err = run("launch", str(job), "--detach", "--store", store_url)
    assert code == 2, err
    assert "no offering satisfies" in err and "memory" in err
    assert daemon.status() is None


def test_logs_prints_what_the_agents_shipped_to_the_store(store_url: str) -> None:
    """`spothop logs` reads the store (job_log_chunks), never a file: whole, --tail, --json."""
    from spothop.state.worker_logs import append_chunk

    with JobStore(store_url) as store:
        job_id = store.create_job(load_job({"name": "shipped", "run": "true"}))
        attempt = store.add_attempt(
            job_id,
            0,
            provider="aws-sim",
            region="r",
            zone="z",
            instance_type="t",
            market_kind="spot",
            price_usd_per_hour=0.5,
        )
        with store.engine.begin() as conn:
            for offset, raw in ((0, b"step 1\n"), (7, "step 2 \u2713\n".encode())):
                append_chunk(
                    conn, job_id=job_id, attempt_id=attempt.attempt_id, offset_bytes=offset, raw=raw
                )
    code, out, _ = run("logs", job_id, "--store", store_url)
    assert code == 0 and "step 1\nstep 2 \u2713\n" in out
    code, out, _ = run("logs", job_id, "--store", store_url, "--tail", "11", "--json")
    assert code == 0 and [e["log"] for e in json.loads(out)] == ["step 2 \u2713\n"]
