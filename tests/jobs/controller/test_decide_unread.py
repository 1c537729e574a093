"""decide when a provider's listing fails: its live jobs say so, with one reason a pass (unread.py)."""

from __future__ import annotations

from dataclasses import replace

from spothop.jobs.controller import EndAttempt, Waiting, decide
from spothop.jobs.controller.unread import UNREAD
from spothop.jobs.lifecycle import JobState
from tests.jobs.controller.factories import PROVIDER, attempt, job, of_type, snapshot

ERROR = "AuthFailed: fake: ExpiredToken: the security token included in the request is expired"


def _unread(jobs, **kw):  # type: ignore[no-untyped-def]
    return replace(
        snapshot(jobs, instances={}, **kw),
        listed_providers=frozenset(),
        provider_errors={PROVIDER: ERROR},
    )


def test_a_live_job_on_an_unread_provider_gets_one_reason_naming_it_and_ends_nothing() -> None:
    running = attempt()
    actions = decide(_unread([job(attempts=[running])]))
    waits = of_type(actions, Waiting)
    assert len(waits) == 1 and waits[0].reason.startswith(f"{PROVIDER} {UNREAD} (AuthFailed")
    assert str(running.instance_id) in waits[0].reason
    assert not of_type(actions, EndAttempt)


def test_finished_jobs_and_jobs_without_instances_there_are_not_told() -> None:
    done = job(job_id="j-done", state=JobState.SUCCEEDED, attempts=[attempt()])
    assert not [w for w in of_type(decide(_unread([done])), Waiting) if UNREAD in w.reason]


def test_once_the_provider_answers_the_job_is_told_it_can_be_read_again() -> None:
    said = job(attempts=[attempt()], reason=f"{PROVIDER} {UNREAD} ({ERROR}): …")
    waits = of_type(decide(snapshot([said])), Waiting)
    assert [w.reason for w in waits] == [f"{PROVIDER} can be read again"]
