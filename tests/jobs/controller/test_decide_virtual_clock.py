"""decide driving whole jobs on a virtual clock, against instances that exist only in a dict.

No processes and no store: a tiny in-test executor carries each action out on
plain data, the clock moves in steps, the cloud preempts when told. This is the
shape ``spothop simulate`` drives decide in.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from spothop.agent.eventmodel import AgentEvent, Exited, FinalNotice
from spothop.jobs.controller import (
    Action,
    CoolDown,
    EndAttempt,
    ForceOnDemand,
    Launch,
    PublishOutputs,
    SetJobState,
    Snapshot,
    Terminate,
    UpdateAttempt,
    decide,
)
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.providers.base import Instance, InstanceState
from spothop.scheduler.market_view import MarketKind
from tests.jobs.controller.factories import (
    NOW,
    PROVIDER,
    attempt,
    instance_of,
    job,
    market,
    queue,
    spec,
    stamp,
)


class VirtualWorld:
    """Jobs, attempts and instances as plain data; ``step`` = observe, decide, execute."""

    def __init__(self, *jobs: Any) -> None:
        self.now = NOW
        self.jobs = {j.job_id: j for j in jobs}
        self.instances: dict[str, Instance] = {}
        self.cooldowns: dict[Any, float] = {}
        self.events: list[AgentEvent] = []
        self.log: list[Action] = []
        self.market = market()  # one view for the whole run: decide reads time from the snapshot

    def snapshot(self) -> Snapshot:
        return Snapshot(
            now=self.now,
            jobs=tuple(self.jobs.values()),
            market=self.market,
            cooldowns=dict(self.cooldowns),
            instances=dict(self.instances),
            listed_providers=frozenset({PROVIDER}),
            events=tuple(self.events),
        )

    def step(self, dt_s: float = 10.0) -> list[Action]:
        actions = decide(self.snapshot())
        self.events = []
        for action in actions:
            self._execute(action)
        self.log += actions
        self.now += dt_s
        return actions

    def _attempt(self, attempt_id: str) -> tuple[str, int]:
        for job_id, j in self.jobs.items():
            for i, a in enumerate(j.attempts):
                if a.attempt_id == attempt_id:
                    return job_id, i
        raise KeyError(attempt_id)

    def _change(self, attempt_id: str, **fields: Any) -> None:
        job_id, i = self._attempt(attempt_id)
        attempts = list(self.jobs[job_id].attempts)
        attempts[i] = attempts[i].with_(**fields)
        self.jobs[job_id] = self.jobs[job_id].with_(attempts=tuple(attempts))

    def _execute(self, action: Action) -> None:
        if isinstance(action, Launch):
            c = action.candidates[0]
            o = c.offering
            new = attempt(
                job_id=action.job_id,
                node=action.node,
                attempt_id=f"{action.token}",
                launch_token=action.token,
                zone=o.zone,
                instance_type=o.instance_type,
                kind=c.market_kind,
                state=AttemptState.LAUNCHING,
                instance_id=f"i-{action.token}",
                launched_at=self.now,
                running_at=None,
            )
            j = self.jobs[action.job_id]
            self.jobs[action.job_id] = j.with_(attempts=(*j.attempts, new))
            self.instances[new.instance_id or ""] = instance_of(new, InstanceState.RUNNING)
        elif isinstance(action, Terminate):
            inst = self.instances[action.instance_id]
            self.instances[action.instance_id] = dataclasses.replace(
                inst, state=InstanceState.TERMINATED
            )
        elif isinstance(action, SetJobState):
            self.jobs[action.job_id] = self.jobs[action.job_id].with_(state=action.state)
        elif isinstance(action, ForceOnDemand):
            self.jobs[action.job_id] = self.jobs[action.job_id].with_(on_demand_forced=True)
        elif isinstance(action, CoolDown):
            self.cooldowns[action.market] = action.until_s
        elif isinstance(action, UpdateAttempt):
            fields = dict(action.fields)
            if action.state is not None:
                fields["state"] = action.state
            self._change(action.attempt_id, **fields)
        elif isinstance(action, EndAttempt):
            self._change(
                action.attempt_id,
                state=AttemptState.ENDED,
                end_reason=action.reason,
                ended_at=action.at_s,
                exit_code=action.exit_code,
            )
        elif isinstance(action, PublishOutputs):
            self.jobs[action.job_id] = self.jobs[action.job_id].with_(outputs_published=True)

    # -- what the cloud and the agents do --------------------------------------------------------

    def live(self, job_id: str = "j-1") -> list[Any]:
        return [a for a in self.jobs[job_id].attempts if a.alive]

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
