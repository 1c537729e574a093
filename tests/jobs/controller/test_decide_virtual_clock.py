"""decide driving whole jobs on a virtual clock, against instances that exist only in a dict.

No processes and no store: a tiny in-test executor carries each action out on
plain data, the clock moves in steps, the cloud preempts when told. This is the
shape ``spothop simulate`` drives decide in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spothop.jobs.controller import (
    Action,
    Launch,
    PublishOutputs,
    decide,
)
from spothop.jobs.controller.simulated import SimulatedWorld
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.providers.base import InstanceState
from spothop.scheduler.market_view import MarketKind
from spothop.wire.events import Exited, FinalNotice
from tests.jobs.controller.factories import (
    NOW,
    job,
    market,
    queue,
    spec,
    stamp,
)


class VirtualWorld(SimulatedWorld):
    """The bridge's in-memory executor (jobs/controller/simulated.py); ``step`` = observe,
    decide, execute, with the clock moving in steps and the cloud preempting when told."""

    def __init__(self, *jobs: Any) -> None:
        super().__init__({j.job_id: j for j in jobs}, now=NOW)
        self.log: list[Action] = []
        self.market = market()  # one view for the whole run: decide reads time from the snapshot

    def step(self, dt_s: float = 10.0) -> list[Action]:
        actions = decide(self.snapshot(self.market))
        self.events = []
        for action in actions:
            self.execute(action)
        self.log += actions
        self.now += dt_s
        return actions

    # -- what the cloud and the agents do --------------------------------------------------------

    def live(self, job_id: str = "j-1") -> list[Any]:
        return super().live(job_id)

    def preempt(self, job_id: str = "j-1", lead_s: float = 30.0) -> Any:
        (victim,) = [a for a in self.live(job_id) if a.state is AttemptState.RUNNING][:1]
        self.events.append(
            FinalNotice(**stamp(victim, self.now), cause="spot", deadline_unix_s=self.now + lead_s)
        )
        inst = self.instances[victim.instance_id]
        self.instances[victim.instance_id] = dataclasses.replace(
            inst, state=InstanceState.PREEMPTED
        )
        return victim

    def finish(self, job_id: str = "j-1", code: int = 0) -> None:
        for a in self.live(job_id):
            self.events.append(Exited(**stamp(a, self.now), code=code))


def test_a_task_job_survives_three_preemptions_and_succeeds() -> None:
    world = VirtualWorld(job(state=JobState.PENDING, job_spec=spec(tolerance="aggressive")))
    world.step()
    world.step()
    assert world.jobs["j-1"].state is JobState.RUNNING
    victims = []
    for _ in range(3):
        victims.append(world.preempt())
        world.step()
        assert world.jobs["j-1"].state is JobState.RECOVERING
        world.step()
        assert world.jobs["j-1"].state is JobState.RUNNING
    # Each relaunch went to a market that had not just preempted it.
    markets = [a.market for a in world.jobs["j-1"].attempts]
    assert len(set(markets)) == 4
    assert world.jobs["j-1"].interruptions == 3
    world.finish()
    world.step()
    assert world.jobs["j-1"].state is JobState.SUCCEEDED
    assert all(not i.state.is_alive for i in world.instances.values())
    assert not world.step()  # a finished world asks nothing


def test_a_balanced_job_moves_to_on_demand_after_repeated_interruptions_and_stays() -> None:
    world = VirtualWorld(job(state=JobState.PENDING))
    world.step()
    for _ in range(3):
        world.step()
        world.preempt()
        world.step()
    (live,) = world.live()
    assert live.market_kind is MarketKind.ON_DEMAND
    for _ in range(5):
        assert not [a for a in world.step() if isinstance(a, Launch)]


def test_a_batch_job_drains_publishes_and_succeeds() -> None:
    batch = job(state=JobState.PENDING, job_spec=spec(kind="batch", workers=3))
    world = VirtualWorld(batch)
    world.step()
    j = world.jobs["j-1"]
    world.jobs["j-1"] = j.with_(shards_enqueued=True, queue=queue(pending=30, leased=3))
    world.step()
    assert world.jobs["j-1"].state is JobState.RUNNING and len(world.live()) == 3
    world.preempt()
    world.step()
    assert len(world.live()) == 3  # the lost worker was replaced
    world.jobs["j-1"] = world.jobs["j-1"].with_(queue=queue(pending=0, leased=0, done=33))
    actions = world.step()
    assert PublishOutputs("j-1") in actions
    world.step()
    assert world.jobs["j-1"].state is JobState.SUCCEEDED
    ended = {a.end_reason for a in world.jobs["j-1"].attempts}
    assert EndReason.PREEMPTED in ended and EndReason.SUCCEEDED in ended
