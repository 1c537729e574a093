"""The bridge: the controller's own ``decide`` driving one deadline job on a virtual clock.

No processes, no store, no cloud: simulated instances on the spot traces that
:mod:`spothop.scheduler.simulate` reads (its :class:`Window` of zones and its
:class:`JobSetting`), and an in-memory executor (:class:`SimulatedWorld`) that
carries ``decide``'s actions out on plain data. One run, tick by tick (tick t
starts at ``t·gap``, the job was created at 0):

1. **The cloud at the boundary**: a spot instance in a zone whose trace says
   unavailable at t is preempted (its listing shows it ``preempted``, ended
   at ``t·gap``); an instance launched at ``l`` runs from ``l + d`` (``d`` the
   restart overhead), which its agent reports (``running_at``); once the work
   is done its agent reports exit 0.
2. **decide** sees a snapshot: the job (spec: ``deadline``, ``work``,
   ``deadline_policy``), its attempts, the listing, a market view of one
   instance type per zone (spot available per the trace at t, at its price at
   t, λ from the trace so far; on-demand at the setting's price), and each
   zone's spot runs as an observer polling once a tick would have logged them.
3. **The executor** applies every action. A launch that replaces an instance
   (a switch of market kind, make-before-break in a real controller) ends the
   replaced one at once: SIMULATION.md's accounting, where the restart
   overhead ``d`` *is* the cost of a switch; a stop to wait ends it at once too.
4. **The tick** ``[t·gap, (t+1)·gap)``: every live instance is billed the whole
   tick at its market's price; the newest one credits work from when it runs.

The result is the simulator's :class:`~spothop.scheduler.simulate.RunResult`,
so the two engines compare field by field (tests/jobs/controller/
test_simulated.py: they agree tick by tick for spothop, greedy and
uniform-progress, on one zone and on several). Multi-zone make-before-break
moves of the model (spothop-proactive) are not modelled here.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from spothop.jobs.controller.actions import (
    Action,
    CoolDown,
    EndAttempt,
    ForceOnDemand,
    Launch,
    PublishOutputs,
    RequestStop,
    SetJobState,
    Terminate,
    UpdateAttempt,
)
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.decide import decide
from spothop.jobs.controller.snapshot import (
    TAG_JOB,
    TAG_NODE,
    TAG_TOKEN,
    AttemptView,
    JobView,
    Snapshot,
)
from spothop.jobs.controller.spot_runs import KEEP_S, SpotRuns
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.spec import JobSpec, load_job
from spothop.providers.base import Instance, InstanceState
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Interconnect, Offering
from spothop.scheduler.market_view import MarketKind, MarketState, MarketView
from spothop.scheduler.policies.base import EPS_S, IDLE, ON_DEMAND, Decision, Kind
from spothop.scheduler.simulate.estimates import MIN_EVIDENCE_TICKS
from spothop.scheduler.simulate.model import (
    S_PER_H,
    JobSetting,
    RunResult,
    SimulationError,
    TickRecord,
    Window,
)
from spothop.wire.events import AgentEvent, Exited

PROVIDER = "sim"
REGION = "sim-1"
INSTANCE_TYPE = "sim.gpu"
JOB_ID = "sim-job"


def _offering(zone: str, setting: JobSetting) -> Offering:
    return Offering(
        provider=PROVIDER,
        region=REGION,
        zone=zone,
        instance_type=INSTANCE_TYPE,
        gpu="H100-SXM5-80GB",
        gpu_count=1,
        vcpus=16.0,
        memory_gib=128.0,
        interconnect=Interconnect.NONE,
        on_demand_price_usd_per_hour=setting.on_demand_price_usd_per_hour,
        spot_price_usd_per_hour=setting.spot_price_usd_per_hour,
        price_date=dt.date(2026, 1, 1),
        source="spothop.simulated",
    )


def job_spec(setting: JobSetting, policy: str) -> JobSpec:
    """The simulated job: a task with the setting's deadline and work, under ``policy``."""
    return load_job(
        {
            "name": "simulated",
            "run": "true",
            "market": "auto",
            "deadline": setting.deadline_s,
            "work": setting.task_s,
            "deadline_policy": policy,
        },
        base_dir=Path("."),
    )


@dataclass
class SimulatedWorld:
    """Jobs, attempts and instances as plain data, and an executor applying ``decide``'s actions.

    ``execute`` carries out one action the way the real executor would, on this
    data; what the cloud and the agents do is done by the caller (the bridge).
    """

    jobs: dict[str, JobView]
    now: float = 0.0
    restart_overhead_s: float = 0.0
    instances: dict[str, Instance] = field(default_factory=dict)
    cooldowns: dict[MarketId, float] = field(default_factory=dict)
    events: list[AgentEvent] = field(default_factory=list)

    def snapshot(
        self, market: MarketView, spot_runs: Mapping[MarketId, SpotRuns] | None = None
    ) -> Snapshot:
        return Snapshot(
            now=self.now,
            jobs=tuple(self.jobs.values()),
            market=market,
            cooldowns=dict(self.cooldowns),
            instances=dict(self.instances),
            listed_providers=frozenset({PROVIDER}),
            events=tuple(self.events),
            spot_runs=dict(spot_runs or {}),
        )

    def attempts(self, job_id: str = JOB_ID) -> tuple[AttemptView, ...]:
        return self.jobs[job_id].attempts

    def live(self, job_id: str = JOB_ID) -> list[AttemptView]:
        return [a for a in self.attempts(job_id) if a.alive]

    def change(self, attempt_id: str, **fields: object) -> None:
        for job_id, j in self.jobs.items():
            attempts = list(j.attempts)
            for i, a in enumerate(attempts):
                if a.attempt_id == attempt_id:
                    attempts[i] = a.with_(**fields)
                    self.jobs[job_id] = j.with_(attempts=tuple(attempts))
                    return
        raise KeyError(attempt_id)

    def end_instance(self, instance_id: str | None, state: InstanceState) -> None:
        inst = self.instances.get(instance_id or "")
        if inst is not None and inst.state.is_alive:
            self.instances[inst.instance_id] = dataclasses.replace(
                inst, state=state, ended_at=self.now
            )

    def execute(self, action: Action) -> None:
        if isinstance(action, Launch):
            self._launch(action)
        elif isinstance(action, Terminate):
            self.end_instance(action.instance_id, InstanceState.TERMINATED)
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
            self.change(action.attempt_id, **fields)
        elif isinstance(action, EndAttempt):
            self.change(
                action.attempt_id,
                state=AttemptState.ENDED,
                end_reason=action.reason,
                ended_at=action.at_s,
                exit_code=action.exit_code,
            )
        elif isinstance(action, RequestStop):  # the agent stops its worker at once
            self._supersede(action.instance_id)
        elif isinstance(action, PublishOutputs):
            self.jobs[action.job_id] = self.jobs[action.job_id].with_(outputs_published=True)
        # Waiting, RequestCheckpoint, EnqueueShards: nothing to carry out on plain data.

    def _supersede(self, instance_id: str | None) -> None:
        for a in [a for j in self.jobs.values() for a in j.attempts if a.alive]:
            if a.instance_id == instance_id:
                self.change(
                    a.attempt_id,
                    state=AttemptState.ENDED,
                    end_reason=EndReason.SUPERSEDED,
                    ended_at=self.now,
                )
        self.end_instance(instance_id, InstanceState.TERMINATED)

    def _launch(self, action: Launch) -> None:
        c = action.candidates[0]
        o = c.offering
        d = self.restart_overhead_s
        running = d <= EPS_S
        # The attempt as the executor would store it, viewed as the observer would (no clock
        # offset: the simulated cloud's clock is the snapshot's).
        record = AttemptRecord(
            attempt_id=action.token,
            job_id=action.job_id,
            node=action.node,
            launch_token=action.token,
            provider=o.provider,
            region=o.region,
            zone=o.zone or "",
            instance_type=o.instance_type,
            market_kind=str(c.market_kind),
            price_usd_per_hour=c.price_usd_per_hour,
            instance_id=f"i-{action.token}",
            state=AttemptState.RUNNING if running else AttemptState.LAUNCHING,
            launched_unix_s=self.now,
            running_unix_s=self.now if running else None,
            noticed_unix_s=None,
            ended_unix_s=None,
            end_reason=None,
            error_code=None,
            error_message=None,
            exit_code=None,
        )
        a = AttemptView.of(record)
        if action.replaces is not None:  # SIMULATION.md's accounting: d is the switch's cost
            old = next(x for x in self.live(action.job_id) if x.attempt_id == action.replaces)
            self._supersede(old.instance_id)
        j = self.jobs[action.job_id]
        self.jobs[action.job_id] = j.with_(attempts=(*j.attempts, a))
        self.instances[a.instance_id or ""] = Instance(
            instance_id=a.instance_id or "",
            provider=a.provider,
            region=a.region,
            zone=a.zone,
            instance_type=a.instance_type,
            spot=a.market_kind is MarketKind.SPOT,
            state=InstanceState.RUNNING if running else InstanceState.PENDING,
            launched_at=self.now,
            price_usd_per_hour=a.price_usd_per_hour,
            running_at=a.running_at,
            tags={TAG_JOB: a.job_id, TAG_NODE: str(a.node), TAG_TOKEN: a.launch_token},
        )


class _TraceRuns:
    """A zone's trace as the runs an observer polling once a tick would have logged: what the
    controller's ``SpotLog`` holds (``KEEP_S`` of runs before the tick, never a later tick)."""

    def __init__(self, available: npt.NDArray[np.bool_]) -> None:
        up = np.asarray(available, dtype=bool)
        starts = np.flatnonzero(np.concatenate([[True], up[1:] != up[:-1]]))
        self.starts: list[int] = starts.tolist()
        self.ups: list[bool] = up[starts].tolist()

    def seen(self, i: int, t: int, gap: float) -> SpotRuns:
        """The runs up to trace tick ``i`` (the job's tick ``t``: time ``t·gap``) on the job's
        clock, from the one that held ``KEEP_S`` before."""
        keep = round(KEEP_S / gap)
        first = max(0, bisect.bisect_right(self.starts, i - keep) - 1)
        last = bisect.bisect_right(self.starts, i)
        return SpotRuns(
            tuple((s - i + t) * gap for s in self.starts[first:last]),
            tuple(self.ups[first:last]),
        )


def _stamp(a: AttemptView, t: float) -> dict[str, Any]:
    return {
        "instance_id": a.instance_id or "",
        "provider": a.provider,
        "region": a.region,
        "zone": a.zone or "",
        "instance_type": a.instance_type,
        "job_id": a.job_id,
        "time_unix_s": t,
        "event_id": f"e-{a.attempt_id}-{t}",
    }


@dataclass
class BridgeRun:
    """A run's result and every action ``decide`` asked for, per tick."""

    result: RunResult
    actions: list[list[Action]]


def simulate_job(
    policy: str,
    window: Window,
    setting: JobSetting,
    *,
    record: bool = False,
) -> BridgeRun:
    """One job with a deadline under ``policy``, driven by ``decide`` tick by tick (module docstring)."""
    return _Bridge(policy, window, setting, record).run()


class _Bridge:
    """One run's clock, cloud and tally (the steps of the module docstring)."""

    def __init__(self, policy: str, window: Window, setting: JobSetting, record: bool) -> None:
        self.policy, self.window, self.setting, self.record = policy, window, setting, record
        self.gap, self.d = window.tick_s, setting.restart_overhead_s
        self.config = ControllerConfig(deadline_tick_s=self.gap, restart_overhead_s=self.d)
        names = [z.name for z in window.zones]
        self.offerings = tuple(_offering(n, setting) for n in names)
        self.zone_index = {n: i for i, n in enumerate(names)}
        job = JobView(JOB_ID, job_spec(setting, policy), JobState.PENDING, created_at=0.0)
        self.world = SimulatedWorld({JOB_ID: job}, restart_overhead_s=self.d)
        self.bill = self.gap / S_PER_H
        self.work_left, self.finish, self.cost = setting.task_s, float("inf"), 0.0
        self.preemptions = self.restarts = self.spot_ticks = self.od_ticks = 0
        self.last: Decision = IDLE
        self.records: list[TickRecord] = []
        self.actions: list[list[Action]] = []
        self.available: list[bool] = []
        self.prices: list[float] = []
        self.rates: list[float] = []
        self.runs = [_TraceRuns(z.available) for z in window.zones]
        self.spot_runs: dict[MarketId, SpotRuns] = {}

    @property
    def done(self) -> bool:
        return self.work_left <= EPS_S

    def run(self) -> BridgeRun:
        horizon = self.setting.horizon_ticks(self.gap)
        for t in range(horizon + 1):
            self.world.now = t * self.gap
            self._market_at(t)
            self._cloud()
            self._decide()
            if self.done:
                j = self.world.jobs[JOB_ID]
                if j.state is not JobState.SUCCEEDED or self.world.live():
                    raise SimulationError(
                        "the simulated job did its work but decide did not end it"
                    )
                break
            if t == horizon:
                raise SimulationError(
                    f"policy {self.policy!r} had not finished {self.setting.task_s / S_PER_H:g} h "
                    f"of work after {horizon} ticks on {self.window.label} (controller engine)"
                )
            self._tick(t)
        return BridgeRun(self._result(), self.actions)

    def _market_at(self, t: int) -> None:
        zones = self.window.zones
        at = [(self.window.start_tick + t) % len(z) for z in zones]
        self.available = [bool(z.available[i]) for z, i in zip(zones, at, strict=True)]
        self.spot_runs = {
            o.market_id: runs.seen(i, t, self.gap)
            for o, runs, i in zip(self.offerings, self.runs, at, strict=True)
        }
        # λ from the trace so far: the hourly rate of the model's per-tick odds of a drop (none
        # before MIN_EVIDENCE_TICKS of trace: infinite, ranked riskiest as the model ranks None)
        odds = [
            z.history.hazards(i)[0] if i + 1 >= MIN_EVIDENCE_TICKS else 1.0
            for z, i in zip(zones, at, strict=True)
        ]
        self.rates = [math.inf if p >= 1.0 else -math.log1p(-p) * S_PER_H / self.gap for p in odds]
        self.prices = [
            self.setting.spot_price_usd_per_hour
            if z.prices_usd_per_hour is None
            else float(z.prices_usd_per_hour[i])
            for z, i in zip(zones, at, strict=True)
        ]

    def _cloud(self) -> None:
        """Step 1: instances come up, spot that is gone is preempted, a finished worker exits."""
        world, now = self.world, self.world.now
        for a in world.live():
            inst = world.instances[a.instance_id or ""]
            if a.running_at is None and a.launched_at + self.d <= now + EPS_S:
                ran = a.launched_at + self.d
                world.change(a.attempt_id, state=AttemptState.RUNNING, running_at=ran)
                inst = dataclasses.replace(inst, state=InstanceState.RUNNING, running_at=ran)
                world.instances[inst.instance_id] = inst
            gone = a.market_kind is MarketKind.SPOT and not self.available[self._zone(a)]
            if gone and inst.state.is_alive and not self.done:  # done: it finished before
                self.preemptions += 1
                world.end_instance(inst.instance_id, InstanceState.PREEMPTED)
        if self.done:
            world.events = [Exited(**_stamp(a, now), code=0) for a in world.live()]

    def _zone(self, a: AttemptView) -> int:
        return self.zone_index[a.zone or ""]

    def _decide(self) -> None:
        """Steps 2 and 3: decide on the snapshot, and carry its actions out."""
        view = MarketView(
            now=self.world.now,
            offerings=self.offerings,
            markets={
                o.market_id: MarketState(
                    o.market_id, spot_price_usd_per_hour=p, available=ok, preemption_rate_per_h=rate
                )
                for o, p, ok, rate in zip(
                    self.offerings, self.prices, self.available, self.rates, strict=True
                )
            },
            boot_s={PROVIDER: self.d},
        )
        asked = decide(self.world.snapshot(view, self.spot_runs), self.config)
        self.world.events = []
        for action in asked:
            self.world.execute(action)
        if self.record:
            self.actions.append(asked)

    def _tick(self, t: int) -> None:
        """Step 4: bill every live instance for the tick; the newest one credits work."""
        now, gap = self.world.now, self.gap
        live = self.world.live()
        od_price = self.setting.on_demand_price_usd_per_hour
        tick_cost = self.bill * sum(
            self.prices[self._zone(a)] if a.market_kind is MarketKind.SPOT else od_price
            for a in live
        )
        credit, decision = 0.0, IDLE
        if live:
            a = max(live, key=lambda a: (a.launched_at, a.attempt_id))
            spot = a.market_kind is MarketKind.SPOT
            decision = Decision(Kind.SPOT, self._zone(a)) if spot else ON_DEMAND
            starts = max(now, a.launched_at + self.d)
            credit = max(0.0, now + gap - starts)
            if credit >= self.work_left - EPS_S:
                credit, self.work_left = self.work_left, 0.0
                self.finish = starts + credit
            else:
                self.work_left -= credit
            self.restarts += decision != self.last
            if spot:
                self.spot_ticks += 1
            else:
                self.od_ticks += 1
        self.cost += tick_cost
        self.last = decision
        if self.record:
            self.records.append(TickRecord(t, decision, credit, tick_cost, self.work_left))

    def _result(self) -> RunResult:
        return RunResult(
            label=self.window.label,
            policy=self.policy,
            start_tick=self.window.start_tick,
            cost_usd=self.cost,
            finish_h=self.finish / S_PER_H,
            deadline_met=self.finish <= self.setting.deadline_s + EPS_S,
            preemptions=self.preemptions,
            restarts=self.restarts,
            spot_hours=self.spot_ticks * self.bill,
            on_demand_hours=self.od_ticks * self.bill,
            ticks=tuple(self.records),
        )
