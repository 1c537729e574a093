"""spothop.service.events: a page of the event stream and the cursor the server hands out."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError
from spothop.jobs.store import JobStore
from spothop.observe.events import Cursor
from spothop.observe.job_report import UnknownJob
from spothop.service.events import cursor_from_text, cursor_text, stream_events
from tests.service.conftest import preempted_job


def test_a_page_resumes_after_its_last_event(store: JobStore) -> None:
    job_id = preempted_job(store)
    store.record_event(job_id, "note", {"n": 1})
    first = stream_events(store, job_id, limit=1)
    assert len(first.events) == 1
    rest = stream_events(store, job_id, first.next)
    every = stream_events(store, job_id)
    assert first.to_list() + rest.to_list() == every.to_list()
    page = first.to_dict()
    assert list(page) == ["events", "next"] and cursor_from_text(page["next"]) == first.next


def test_the_cursor_text_reads_back_as_the_cursor() -> None:
    cursor = Cursor(7, 1234.5, frozenset({"ev-1", "ev-2"}))
    assert cursor_from_text(cursor_text(cursor)) == cursor
    assert cursor_from_text(None) is None and cursor_from_text("") is None


def test_a_cursor_the_server_did_not_give_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="after_id is not a cursor this server gave"):
        cursor_from_text("bm90IGpzb24")


def test_an_unknown_jobs_stream_names_the_job(store: JobStore) -> None:
    with pytest.raises(UnknownJob):
        stream_events(store, "j-nope")
