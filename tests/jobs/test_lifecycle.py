"""The lifecycle tables: every pair of states is walked, the legal ones pass and the rest are refused."""

from __future__ import annotations

import itertools

import pytest

from spothop.errors import SpothopError
from spothop.jobs.lifecycle import (
    ATTEMPT_TRANSITIONS,
    LIVE_STATES,
    TRANSITIONS,
    AttemptState,
    IllegalTransition,
    JobState,
    check_attempt_transition,
    check_transition,
)

# The lifecycle as the issue draws it, spelled out again here so a change to the table is a change to
# this test too.
EXPECTED = {
    ("pending", "provisioning"),
    ("provisioning", "running"),
    ("provisioning", "pending"),
    ("provisioning", "recovering"),
    ("running", "recovering"),
    ("recovering", "running"),
    ("running", "succeeded"),
    ("recovering", "succeeded"),
    *{
        (s, end)
        for s in ("pending", "provisioning", "running", "recovering")
        for end in ("failed", "cancelled")
    },
}


@pytest.mark.parametrize(
    ("current", "requested"), list(itertools.product(JobState, JobState)), ids=str
)
def test_every_pair_of_job_states(current: JobState, requested: JobState) -> None:
    if (current.value, requested.value) in EXPECTED:
        check_transition(current, requested)
        assert requested in TRANSITIONS[current]
    else:
        with pytest.raises(IllegalTransition) as caught:
            check_transition(current, requested, "job j-000001")
        message = str(caught.value)
        assert "job j-000001" in message and current.value in message and requested.value in message


def test_final_states_are_final_and_the_rest_live() -> None:
    assert {s for s in JobState if s.final} == {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
    }
    assert {s for s in JobState if not s.final} == LIVE_STATES
    assert str(JobState.RUNNING) == "running"


def test_an_illegal_transition_says_where_the_state_may_go() -> None:
    with pytest.raises(
        IllegalTransition, match="pending may move only to cancelled, failed, provisioning"
    ):
        check_transition(JobState.PENDING, JobState.RUNNING)
    with pytest.raises(IllegalTransition, match="it already is running"):
        check_transition(JobState.RUNNING, JobState.RUNNING)
    with pytest.raises(IllegalTransition, match="it is final"):
        check_transition(JobState.SUCCEEDED, JobState.RUNNING)
    assert issubclass(IllegalTransition, SpothopError)


@pytest.mark.parametrize(
    ("current", "requested"), list(itertools.product(AttemptState, AttemptState)), ids=str
)
def test_every_pair_of_attempt_states(current: AttemptState, requested: AttemptState) -> None:
    order = list(AttemptState)
    # Attempts only move forward, and anything live may end.
    legal = order.index(requested) > order.index(current) and not (
        current is AttemptState.RUNNING and requested is AttemptState.PENDING
    )
    assert (requested in ATTEMPT_TRANSITIONS[current]) is legal
    if legal:
        check_attempt_transition(current, requested)
    else:
        with pytest.raises(IllegalTransition):
            check_attempt_transition(current, requested)
