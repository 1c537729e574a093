"""Reserved capacity first: the providers' pools reach decide, the executor launches into them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from spothop.jobs.controller import Launch, decide
from spothop.jobs.controller.executor import Executor
from spothop.jobs.controller.observe import reserved_pools
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.providers.reservations import Reservation
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.controller.factories import (
    A100,
    PROVIDER,
    REGION,
    ZONES,
    attempt,
    job,
    market_id,
    of_type,
    snapshot,
    spec,
)
from tests.waiting import wait_for


def pool(zone: str = ZONES[1], count: int = 1, in_use: int = 0, rid: str = "") -> Reservation:
    return Reservation(
        reservation_id=rid or f"{zone}/{A100}",
        provider=PROVIDER,
        region=REGION,
        zone=zone,
        instance_type=A100,
        count=count,
        price_usd_per_hour=0.5,
        in_use=in_use,
    )


def launches(actions: list[Any]) -> list[Launch]:
    return of_type(actions, Launch)


def test_a_providers_pool_is_used_first_and_spot_carries_the_rest() -> None:
    batch = job(state=JobState.PENDING, job_spec=spec(kind="batch", workers=3))
    shot = replace(snapshot([batch]), reservations=(pool(),))
    first, *rest = launches(decide(shot))
    assert first.candidates[0].market_kind is MarketKind.RESERVED
    assert first.candidates[0].market_id == market_id(ZONES[1], A100)
    assert first.reason == "reserved capacity first"
    assert len(rest) == 2 and {c.candidates[0].market_kind for c in rest} == {MarketKind.SPOT}


def test_a_pool_the_provider_counts_full_is_not_offered() -> None:
    batch = job(state=JobState.PENDING, job_spec=spec(kind="batch", workers=2))
    shot = replace(snapshot([batch]), reservations=(pool(in_use=1),))
    assert MarketKind.RESERVED not in {
        c.market_kind for launch in launches(decide(shot)) for c in launch.candidates
    }


def test_a_pool_held_by_a_live_attempt_counts_even_before_the_provider_lists_it() -> None:
    holder = job("j-0", attempts=[attempt("j-0", zone=ZONES[1], kind=MarketKind.RESERVED)])
    newcomer = job("j-1", state=JobState.PENDING)
    shot = replace(snapshot([holder, newcomer]), reservations=(pool(in_use=0),))
    (launch,) = launches(decide(shot))
    assert launch.job_id == "j-1" and launch.candidates[0].market_kind is MarketKind.SPOT


def test_the_specs_reserved_entries_narrow_the_pools_a_job_may_use() -> None:
    entry = {"provider": PROVIDER, "instance_type": A100, "zone": ZONES[2], "count": 1}
    task = job(state=JobState.PENDING, job_spec=spec(reserved=[entry]))
    shot = replace(snapshot([task]), reservations=(pool(ZONES[1]), pool(ZONES[2])))
    (launch,) = launches(decide(shot))
    assert launch.candidates[0].market_kind is MarketKind.RESERVED
    assert launch.candidates[0].market_id.zone == ZONES[2]


def test_a_pool_outside_the_jobs_requirements_is_not_offered() -> None:
    other = job(state=JobState.PENDING, job_spec=spec(resources={"accelerators": "H100:1"}))
    shot = replace(snapshot([other]), reservations=(pool(),))
    (launch,) = launches(decide(shot))
    assert launch.candidates[0].market_kind is not MarketKind.RESERVED


def test_a_failed_reserved_launch_fails_over_to_other_markets() -> None:
    failed = attempt(
        zone=ZONES[1],
        kind=MarketKind.RESERVED,
        state=AttemptState.ENDED,
        end_reason=EndReason.LAUNCH_FAILED,
        error_code="FakeCapacityUnavailable",
        instance_id=None,
    )
    task = job(state=JobState.PROVISIONING, attempts=[failed])
    shot = replace(snapshot([task]), reservations=(pool(),))
    (launch,) = launches(decide(shot))
    assert launch.parallel
    assert MarketKind.RESERVED not in {c.market_kind for c in launch.candidates}


# -- the observer and the executor, against the fake provider ------------------------------------


def _candidate(offering: Any) -> Candidate:
    return Candidate(
        offering=offering,
        market_kind=MarketKind.RESERVED,
        price_usd_per_hour=0.5,
        preemption_rate_per_h=0.0,
        effective_tflops=100.0,
        goodput=1.0,
        egress_usd=0.0,
        score=0.005,
    )


def _setup(
    tmp_path: Path, pools: list[Reservation]
) -> tuple[JobStore, FakeProvider, Executor, str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    offerings = make_offerings(provider=PROVIDER, region=REGION, zones=ZONES)
    provider = FakeProvider(
        PROVIDER,
        markets=[make_market(o) for o in offerings],
        clock=ManualClock(),
        reservations=pools,
    )
    executor = Executor(store, {PROVIDER: provider}, store_url=url, home=tmp_path)
    return store, provider, executor, store.create_job(spec(kind="batch", workers=3))


def _offering(provider: FakeProvider, zone: str) -> Any:
    return next(o for o in provider.list_offerings() if o.zone == zone and o.instance_type == A100)


def test_the_observer_lists_the_pools_with_their_use(tmp_path: Path) -> None:
    store, provider, executor, _ = _setup(tmp_path, [pool(count=2)])
    try:
        (listed,) = reserved_pools({PROVIDER: provider})
        assert (listed.reservation_id, listed.count, listed.in_use) == (f"{ZONES[1]}/{A100}", 2, 0)
    finally:
        executor.close()
        store.close()


def test_a_reserved_candidate_launches_into_the_pool_and_a_full_pool_fails_typed(
    tmp_path: Path,
) -> None:
    store, provider, executor, job_id = _setup(tmp_path, [pool(count=1)])
    try:
        offering = _offering(provider, ZONES[1])
        assert executor.step(Launch(job_id, 0, (_candidate(offering),), "t.a0", "reserved")).ok
        wait_for(lambda: not executor.launching(), 10, what="the reserved launch to end")
        (instance,) = provider.list_instances()
        assert instance.reservation == f"{ZONES[1]}/{A100}" and not instance.spot
        assert instance.market == "reserved"
        assert executor.step(Launch(job_id, 1, (_candidate(offering),), "t.a1", "reserved")).ok
        wait_for(lambda: not executor.launching(), 10, what="the second launch to end")
        # By token: the fake's manual clock gives every attempt the same launch time.
        second = store.attempt_by_token("t.a1")
        assert second is not None
        assert second.end_reason is EndReason.LAUNCH_FAILED
        assert second.error_code == provider.codes.capacity_unavailable
        elsewhere = _offering(provider, ZONES[0])
        assert executor.step(Launch(job_id, 2, (_candidate(elsewhere),), "t.a2", "reserved")).ok
        wait_for(lambda: not executor.launching(), 10, what="the third launch to end")
        third = store.attempt_by_token("t.a2")
        assert third is not None and third.error_code == provider.codes.invalid_parameter
        assert len(provider.list_instances()) == 1
    finally:
        executor.close()
        store.close()
