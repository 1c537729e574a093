"""spothop.service.logs: each attempt's output, as the agents shipped it to the store, whole,
tailed or followed."""

from __future__ import annotations

import pytest

from spothop.jobs.errors import JobNotFound
from spothop.jobs.store import JobStore
from spothop.service.logs import LogTail, job_logs
from spothop.state.worker_logs import append_chunk, stored_end
from tests.service.conftest import preempted_job


def _ship(store: JobStore, job_id: str, raw: bytes) -> None:
    """``raw`` appended to the job's one attempt's output, as the control plane stores a chunk."""
    (attempt,) = store.attempts(job_id)
    with store.engine.begin() as conn:
        end = stored_end(conn, job_id, attempt.attempt_id)
        append_chunk(conn, job_id=job_id, attempt_id=attempt.attempt_id, offset_bytes=end, raw=raw)


def test_the_logs_name_where_each_attempt_ran_and_tail_its_output(store: JobStore) -> None:
    job_id = preempted_job(store)
    _ship(store, job_id, b"step 1\n")
    _ship(store, job_id, b"step 2\n")
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
    assert job_logs(store, job_id, tail_bytes=0).to_list()[0]["log"] == ""
    assert job_logs(store, job_id, node=1).to_list() == []


def test_an_attempt_that_shipped_nothing_reads_as_empty(store: JobStore) -> None:
    job_id = preempted_job(store)
    assert [e["log"] for e in job_logs(store, job_id).to_list()] == [""]


def test_a_character_split_between_two_chunks_reads_whole(store: JobStore) -> None:
    job_id = preempted_job(store)
    text = "température ✓\n".encode()
    cut = text.index("✓".encode()) + 1  # inside the three bytes of ✓
    _ship(store, job_id, text[:cut])
    tail = LogTail(store, job_id)
    assert [e.log for e in tail.read()] == ["température "]  # the half character waits
    _ship(store, job_id, text[cut:])
    assert [e.log for e in tail.read()] == ["✓\n"]
    assert job_logs(store, job_id).to_list()[0]["log"] == "température ✓\n"
    # A tail cut inside a character starts at the next whole one.
    assert job_logs(store, job_id, tail_bytes=3).to_list()[0]["log"] == "\n"


def test_following_hands_out_only_what_each_log_gained(store: JobStore) -> None:
    job_id = preempted_job(store)
    tail = LogTail(store, job_id)
    assert list(tail.read()) == []  # nothing shipped yet: nothing to show
    _ship(store, job_id, b"a\n")
    assert [e.log for e in tail.read()] == ["a\n"]
    _ship(store, job_id, b"b\n")
    assert [e.log for e in tail.read()] == ["b\n"]
    assert [e.log for e in tail.read()] == [""]


def test_following_with_a_tail_starts_near_the_end(store: JobStore) -> None:
    job_id = preempted_job(store)
    _ship(store, job_id, b"old\nnew\n")
    tail = LogTail(store, job_id, tail_bytes=4)
    assert [e.log for e in tail.read()] == ["new\n"]
    _ship(store, job_id, b"more\n")
    assert [e.log for e in tail.read()] == ["more\n"]


def test_an_unknown_jobs_logs_are_refused_at_once(store: JobStore) -> None:
    with pytest.raises(JobNotFound):
        LogTail(store, "j-nope")
    with pytest.raises(JobNotFound):
        job_logs(store, "j-nope")
