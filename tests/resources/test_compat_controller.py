"""The controller places a job's next instance only where its checkpoint may move."""

from __future__ import annotations

from spothop.jobs.controller import decide
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.place import JobPlacement, checkpoint_gpu_of
from spothop.jobs.lifecycle import EndReason
from spothop.scheduler.market_view import MarketKind
from tests.jobs.controller.factories import (
    A100,
    H100,
    NOW,
    ZONES,
    ended,
    job,
    launches,
    market,
    snapshot,
    spec,
)

CKPT = {"url": "s3://ckpt/train", "compatibility": {}}  # opted in: the matrix's own rules
RAN = NOW - 3500  # when an attempt reached running (the factory leaves it unset once ended)


def _types(actions) -> set[str]:  # type: ignore[no-untyped-def]
    (launch,) = launches(actions)
    return {c.market_id.instance_type for c in launch.candidates}


def test_a_job_preempted_on_hopper_is_relaunched_only_on_hopper() -> None:
    lost = ended(EndReason.PREEMPTED, instance_type=H100, zone=ZONES[0], running_at=RAN)
    with_checkpoint = job(attempts=[lost], job_spec=spec(checkpoint=CKPT))
    assert _types(decide(snapshot([with_checkpoint]))) == {H100}
    assert _ranked_types(with_checkpoint) == {H100}
    # The same job without a checkpoint section, or not opted in, may go to an A100 too.
    assert _ranked_types(job(attempts=[lost])) == {H100, A100}
    not_opted = job(attempts=[lost], job_spec=spec(checkpoint={"url": "s3://ckpt/train"}))
    assert _ranked_types(not_opted) == {H100, A100}


def _ranked_types(view) -> set[str]:  # type: ignore[no-untyped-def]
    placement = JobPlacement(snapshot([view]), view, ControllerConfig(), frozenset(), frozenset())
    return {c.market_id.instance_type for c in placement.ranking(MarketKind.SPOT).candidates}


def test_a_checkpoint_from_ampere_may_move_to_hopper() -> None:
    lost = ended(EndReason.PREEMPTED, instance_type=A100, zone=ZONES[0], running_at=RAN)
    assert _ranked_types(job(attempts=[lost], job_spec=spec(checkpoint=CKPT))) == {H100, A100}


def test_the_placement_debug_shows_the_matrix_reason() -> None:
    lost = ended(EndReason.PREEMPTED, instance_type=H100, zone=ZONES[0], running_at=RAN)
    view = job(attempts=[lost], job_spec=spec(checkpoint=CKPT))
    snap = snapshot([view])
    placement = JobPlacement(snap, view, ControllerConfig(), frozenset(), frozenset())
    assert placement.checkpoint_gpu == "H100-SXM5-80GB"
    ranking = placement.ranking(MarketKind.SPOT)
    assert ranking.excluded["compatible"] == len(ZONES)
    assert ranking.refused == {
        "A100-SXM4-80GB": "H100-SXM5-80GB → A100-SXM4-80GB: architecture Ampere is older "
        "than the checkpoint's Hopper"
    }
    assert "refused by the compatibility matrix" in ranking.explain()


def test_a_declared_minimum_lets_the_checkpoint_move_back_to_ampere() -> None:
    lost = ended(EndReason.PREEMPTED, instance_type=H100, zone=ZONES[0], running_at=RAN)
    portable = spec(checkpoint={**CKPT, "compatibility": {"min_architecture": "Ampere"}})
    assert _ranked_types(job(attempts=[lost], job_spec=portable)) == {H100, A100}
    big = spec(checkpoint={**CKPT, "compatibility": {"state_memory_gib": 81}})
    lost_a100 = ended(EndReason.PREEMPTED, instance_type=A100, zone=ZONES[0], running_at=RAN)
    # No 80 GiB part holds 81 GiB of state per GPU: nothing to launch, and the job waits.
    assert launches(decide(snapshot([job(attempts=[lost_a100], job_spec=big)]))) == []


def test_only_an_attempt_that_ran_names_the_checkpoint_gpu() -> None:
    never_ran = ended(EndReason.LAUNCH_FAILED, instance_type=H100, running_at=None)
    view = job(attempts=[never_ran], job_spec=spec(checkpoint=CKPT))
    assert checkpoint_gpu_of(view, market()) is None
    ran = ended(EndReason.PREEMPTED, n=1, instance_type=A100, running_at=RAN)
    newer = ended(EndReason.PREEMPTED, n=2, instance_type=H100, running_at=RAN + 60)
    both = job(attempts=[ran, newer, never_ran], job_spec=spec(checkpoint=CKPT))
    assert checkpoint_gpu_of(both, market()) == "H100-SXM5-80GB"
    assert checkpoint_gpu_of(job(attempts=[ran]), market()) is None  # no checkpoint section
