"""decide: a launch a provider refuses for good (``launch_refused``) is not a market's failure.

Configuration, credentials and an invalid request repeat on every candidate of that provider:
the job stops trying the provider, and fails with the error's whole text when no other allowed
provider can take it. Capacity errors (``launch_failed``) keep their failover.
"""

from __future__ import annotations

from spothop.jobs.controller import AttemptView, SetJobState, Waiting, decide
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.providers.fake.factories import make_offerings
from spothop.scheduler.market_view import MarketState, MarketView
from tests.jobs.controller.factories import (
    BOOT_S,
    CALM_RATE_PER_H,
    NOW,
    PROVIDER,
    REGION,
    ZONES,
    attempt,
    ended,
    job,
    launches,
    of_type,
    snapshot,
    spec,
)

NO_IMAGE = (
    "fake: no AMI to launch in fake-1: set SPOTHOP_FAKE_IMAGE_ID to an AMI with NVIDIA drivers"
)
OTHER = "other"


def refused(
    n: int = 0, message: str = NO_IMAGE, code: str = "ConfigError", **fields: object
) -> AttemptView:
    return ended(
        EndReason.LAUNCH_REFUSED,
        n=n,
        instance_id=None,
        running_at=None,
        error_code=code,
        error_message=message,
        **fields,
    )


def two_providers() -> MarketView:
    """The factories' market of ``fake`` plus the same offerings on a provider ``other``."""
    offerings = make_offerings(provider=PROVIDER, region=REGION, zones=ZONES)
    offerings += make_offerings(provider=OTHER, region="other-1", zones=("other-1a",))
    markets = {
        o.market_id: MarketState(o.market_id, available=True, preemption_rate_per_h=CALM_RATE_PER_H)
        for o in offerings
    }
    return MarketView(
        now=NOW,
        offerings=tuple(offerings),
        markets=markets,
        boot_s={PROVIDER: BOOT_S, OTHER: BOOT_S},
    )


def test_a_refused_launch_fails_the_job_with_the_clouds_message_when_no_provider_is_left() -> None:
    lone = job(state=JobState.PROVISIONING, attempts=[refused()])
    actions = decide(snapshot([lone]))
    assert not launches(actions) and not of_type(actions, Waiting)
    failed = [a for a in of_type(actions, SetJobState) if a.state is JobState.FAILED]
    (move,) = failed
    assert NO_IMAGE in move.reason and "fake refused" in move.reason
    assert "submit the job again" in move.reason


def test_a_refused_provider_is_left_out_and_another_provider_takes_the_job() -> None:
    lone = job(state=JobState.PROVISIONING, attempts=[refused()])
    actions = decide(snapshot([lone], view=two_providers()))
    (launch,) = launches(actions)
    assert {c.market_id.provider for c in launch.candidates} == {OTHER}
    assert not launch.parallel  # a refusal is no market's failure: an ordinary launch
    assert JobState.FAILED not in {a.state for a in of_type(actions, SetJobState)}


def test_every_allowed_provider_refusing_fails_the_job_naming_each() -> None:
    other = refused(1, "other: AuthFailure: credentials expired", "AuthFailure", provider=OTHER)
    lone = job(state=JobState.PROVISIONING, attempts=[refused(), other])
    actions = decide(snapshot([lone], view=two_providers()))
    assert not launches(actions)
    (move,) = [a for a in of_type(actions, SetJobState) if a.state is JobState.FAILED]
    assert NO_IMAGE in move.reason and "credentials expired" in move.reason


def test_a_refusal_waits_for_the_jobs_live_attempts_before_failing_it() -> None:
    # A parallel launch's other attempt is still in flight: its outcome is awaited first.
    in_flight = attempt(
        n=1, state=AttemptState.LAUNCHING, instance_id=None, running_at=None, launched_at=NOW - 5
    )
    lone = job(state=JobState.PROVISIONING, attempts=[refused(), in_flight])
    actions = decide(snapshot([lone]))
    assert JobState.FAILED not in {a.state for a in of_type(actions, SetJobState)}


def test_a_capacity_failure_still_fails_over_within_the_provider() -> None:
    failed = ended(
        EndReason.LAUNCH_FAILED, instance_id=None, running_at=None, error_code="NoCapacity"
    )
    lone = job(state=JobState.PROVISIONING, attempts=[failed])
    actions = decide(snapshot([lone]))
    (launch,) = launches(actions)
    assert launch.parallel and {c.market_id.provider for c in launch.candidates} == {PROVIDER}
    assert JobState.FAILED not in {a.state for a in of_type(actions, SetJobState)}


def test_a_deadline_job_leaves_a_refused_provider_out_too() -> None:
    timed = spec(deadline="8h", work="2h")
    lone = job(state=JobState.PROVISIONING, attempts=[refused()], job_spec=timed)
    actions = decide(snapshot([lone], view=two_providers()))
    for launch in launches(actions):
        assert {c.market_id.provider for c in launch.candidates} == {OTHER}
    assert launches(actions) or of_type(actions, Waiting)


def test_a_node_waiting_while_one_provider_refuses_says_why_that_provider_is_not_tried() -> None:
    # ``other`` can take the job but has no capacity now: the job waits, and says why not fake.
    view = two_providers()
    full = MarketView(
        now=view.now,
        offerings=view.offerings,
        markets={
            m: MarketState(m, available=m.provider != OTHER, preemption_rate_per_h=0.02)
            for m in view.markets
        },
        boot_s=view.boot_s,
    )
    lone = job(
        state=JobState.PROVISIONING, attempts=[refused()], job_spec=spec(tolerance="aggressive")
    )
    actions = decide(snapshot([lone], view=full))
    assert not launches(actions)
    (waiting,) = of_type(actions, Waiting)
    assert f"fake refused: {NO_IMAGE}" in waiting.reason
    assert JobState.FAILED not in {a.state for a in of_type(actions, SetJobState)}
