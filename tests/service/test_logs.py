"""spothop.service.logs: each attempt's output, whole, tailed or followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.jobs.errors import JobNotFound
from spothop.jobs.launcher import attempt_log_path
from spothop.jobs.store import JobStore
from spothop.service.logs import LogTail, job_logs, read_log
from tests.service.conftest import preempted_job


def _log_of(store: JobStore, job_id: str) -> Path:
    (attempt,) = store.attempts(job_id)
    path = attempt_log_path(job_id, attempt.node, attempt.attempt_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_the_logs_name_where_each_attempt_ran_and_tail_its_output(store: JobStore) -> None:
    job_id = preempted_job(store)
    _log_of(store, job_id).write_text("step 1\nstep 2\n")
    (entry,) = job_logs(store, job_id).to_list()
    assert list(entry) == [
        "attempt_id",
        "node",
        "instance_id",
        "provider",
        "zone",
        "instance_type",
        "market",
        "log",
    ]
    assert entry["log"] == "step 1\nstep 2\n" and entry["market"] == "spot"
    assert job_logs(store, job_id, tail_bytes=7).to_dict()["logs"][0]["log"] == "step 2\n"
    assert job_logs(store, job_id, node=1).to_list() == []


def test_a_log_not_written_yet_reads_as_empty(tmp_path: Path) -> None:
    assert read_log(tmp_path / "none.log") == ""


def test_following_hands_out_only_what_each_log_gained(store: JobStore) -> None:
    job_id = preempted_job(store)
    tail = LogTail(store, job_id)
    assert list(tail.read()) == []  # no log yet: nothing to show
    path = _log_of(store, job_id)
    path.write_text("a\n")
    assert [e.log for e in tail.read()] == ["a\n"]
    with path.open("a") as handle:
        handle.write("b\n")
    assert [e.log for e in tail.read()] == ["b\n"]
    assert [e.log for e in tail.read()] == [""]


def test_an_unknown_jobs_logs_are_refused_at_once(store: JobStore) -> None:
    with pytest.raises(JobNotFound):
        LogTail(store, "j-nope")
    with pytest.raises(JobNotFound):
        job_logs(store, "j-nope")
