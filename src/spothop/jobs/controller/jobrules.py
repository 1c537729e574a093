"""Step 4 of a pass: one job's rules, from cancel to the state it settles on.

Per job (:class:`JobDecision`): cancel → fail (retries, dead shards, ``max_interruptions``, no
progress or budget: :mod:`.progress`) → succeed (every node done; a batch queue drained and its
outputs published) → per node: hand over, replace, fail over or launch → fail when every provider
that could take it refuses (:meth:`JobDecision._refused`) → the job's state. A job with a deadline
launches (and switches, make-before-break) only in the market kind its deadline policy chooses this
pass (:mod:`.deadline`). Pure, like :func:`~.decide.decide`."""

from __future__ import annotations

from dataclasses import dataclass, field

from spothop.jobs.controller.actions import (
    Action,
    EndAttempt,
    EnqueueShards,
    ForceOnDemand,
    Launch,
    PublishOutputs,
    RequestCheckpoint,
    RequestStop,
    SetJobState,
    Terminate,
    Waiting,
)
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.deadline import DeadlinePlan, deadline_plan
from spothop.jobs.controller.group import group_actions, group_succeeded
from spothop.jobs.controller.place import JobPlacement, ReservedLedger, refusal_reason
from spothop.jobs.controller.progress import deadline_missed, stalled
from spothop.jobs.controller.snapshot import AttemptView, JobView, Snapshot
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, job_state_path
from spothop.jobs.spec import JobKind, OnMaxInterruptions
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.scheduler.spread import spread
from spothop.scheduler.tolerance import NoticeBlindResponse


@dataclass
class Pass:
    """What one pass knows before it decides on each job: the snapshot, the config, the markets left out."""

    snapshot: Snapshot
    config: ControllerConfig
    cooled: frozenset[MarketId]
    blind_types: frozenset[tuple[str, str]]
    reserved: ReservedLedger
    suspected: frozenset[MarketId] = frozenset()
    # A zone cooled for an outage → when that outage's window opened.
    outage_opened: dict[MarketId, float] = field(default_factory=dict)

    def moved_by_outage(self, a: AttemptView) -> bool:
        """A live attempt launched into a zone during the window of the outage it is cooled for:
        no survivor (:func:`~.cooldowns.zone_outages`), it is replaced elsewhere, make-before-break,
        like one on advance notice."""
        if not a.zone or not a.alive:
            return False
        opened = self.outage_opened.get(MarketId(a.provider, a.region, a.zone, ""))
        return opened is not None and a.launched_at >= opened


# An attempt that ended so never ran: the next launch for its node is no recovery.
_LAUNCH_ENDS = frozenset(
    {EndReason.LAUNCH_FAILED, EndReason.LAUNCH_REFUSED, EndReason.REGION_REFUSED}
)


# -- one job ---------------------------------------------------------------------------------


@dataclass
class _Node:
    """One node's attempts this pass, and what it needs."""

    index: int
    attempts: tuple[AttemptView, ...]
    alive: list[AttemptView] = field(default_factory=list)
    healthy: list[AttemptView] = field(default_factory=list)
    doomed: list[AttemptView] = field(default_factory=list)
    moving: list[AttemptView] = field(default_factory=list)  # in a zone an outage cooled
    switching: list[AttemptView] = field(default_factory=list)  # off the deadline policy's kind
    blind_on_demand: bool = False  # a notice-blind instance goes to on-demand (conservative)

    @property
    def keeper(self) -> AttemptView | None:
        running = [a for a in self.healthy if a.state is AttemptState.RUNNING]
        return min(running, key=_run_order) if running else None

    @property
    def serving(self) -> bool:
        """An instance does the node's work now: a healthy one, one on advance notice still up,
        or one moving out of a zone an outage cooled."""
        return self.keeper is not None or any(
            (a.state is AttemptState.NOTICED and not a.notice_final and a.running_at is not None)
            or ((a in self.moving or a in self.switching) and a.state is AttemptState.RUNNING)
            for a in self.doomed
        )

    @property
    def ran_before(self) -> bool:
        return any(a.running_at is not None or a.interrupted for a in self.attempts)

    @property
    def last(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None


def launch_order(a: AttemptView) -> tuple[float, str]:
    return (a.launched_at, a.attempt_id)


def _run_order(a: AttemptView) -> tuple[float, float, str]:
    return (
        a.running_at if a.running_at is not None else a.launched_at,
        a.launched_at,
        a.attempt_id,
    )


class JobDecision:
    """One job's actions this pass (module docstring)."""

    def __init__(self, p: Pass, job: JobView) -> None:
        self.p = p
        self.job = job
        self.spec = job.spec
        self.now = p.snapshot.now
        self.out: list[Action] = []
        self.launched = 0  # launches asked in this pass (tokens count on from the attempts)
        self._placement: JobPlacement | None = None
        self.plan: DeadlinePlan | None = None

    @property
    def placement(self) -> JobPlacement:
        if self._placement is None:
            self._placement = JobPlacement(
                self.p.snapshot,
                self.job,
                self.p.config,
                self.p.cooled,
                self.p.blind_types,
                self.p.suspected,
            )
        return self._placement

    @property
    def batch(self) -> bool:
        return self.spec.kind is JobKind.BATCH

    # -- the order of the rules ------------------------------------------------------------

    def actions(self) -> list[Action]:
        job = self.job
        if job.state.final:
            self._release_all(EndReason.TERMINATED, f"the job is {job.state.value}")
            return self.out
        if job.cancel_requested:
            self._release_all(EndReason.CANCELLED, "the job was cancelled")
            self._move(JobState.CANCELLED, "cancelled by the user")
            return self.out
        failure = self._failure()
        if failure is not None:
            self._release_all(EndReason.TERMINATED, failure)
            self._move(JobState.FAILED, failure)
            return self.out
        if self.spec.grouped:
            if group_succeeded(job):
                self._release_all(EndReason.SUCCEEDED, "released: every node is done")
                self._move(JobState.SUCCEEDED, "every node of the group finished (exit 0)")
            elif (refused := self._refused()) is not None:
                self._move(JobState.FAILED, refused)
            else:
                group_actions(self, self._on_demand_forced())
            return self.out
        if self.batch and not job.shards_enqueued:
            self.out.append(EnqueueShards(job.job_id))
        if self._finished():
            return self.out
        forced = self._on_demand_forced()
        if not forced:
            self.plan = deadline_plan(self.p.snapshot, job, self.p.config)
        nodes = self._nodes()
        self._release_idle(nodes)
        wanted = self._wanted(nodes)
        for node in nodes:
            self._handover(node)
        self._launch(wanted, forced)
        if (refused := self._refused()) is not None:  # the nodes' waits are moot: it fails
            self.out[:] = [a for a in self.out if not isinstance(a, Waiting)]
            self._move(JobState.FAILED, refused)
            return self.out
        self._settle_state(nodes, wanted)
        return self.out

    # -- what the group rules use (group.JobContext) ----------------------------------------

    def snapshot(self) -> Snapshot:
        return self.p.snapshot

    def config(self) -> ControllerConfig:
        return self.p.config

    def next_token(self) -> str:
        """The next launch token: ``<job>.a<n>``, ``n`` counting the job's attempts and this pass's."""
        token = f"{self.job.job_id}.a{len(self.job.attempts) + self.launched}"
        self.launched += 1
        return token

    def end(self, a: AttemptView, reason: EndReason, detail: str, terminate: bool) -> None:
        self._end(a, reason, detail, terminate)

    def move(self, target: JobState, why: str) -> None:
        self._move(target, why)

    def release_all(self, reason: EndReason, detail: str) -> None:
        self._release_all(reason, detail)

    # -- ending ----------------------------------------------------------------------------

    def _release_all(self, reason: EndReason, detail: str) -> None:
        """End every live attempt, terminating its instance; not one whose launch may be under way.

        An attempt still ``launching`` with no instance id may be inside its
        provider's launch call: ended now, the instance that call returns would
        be known by its tag only, never by id. It is left to a later pass, which
        sees its instance (ends it then, with a :class:`Terminate`: a final job
        stays in the snapshot while it owns a live attempt) or its launch's end.
        """
        for a in self.job.attempts:
            if not a.alive or (a.state is AttemptState.LAUNCHING and a.instance_id is None):
                continue
            self._end(a, reason, detail, terminate=True)

    def _end(self, a: AttemptView, reason: EndReason, detail: str, terminate: bool) -> None:
        if terminate and a.instance_id:
            self.out.append(Terminate(a.instance_id, a.provider, detail, a.job_id))
        self.out.append(EndAttempt(a.attempt_id, a.job_id, reason, self.now, detail))

    def _failure(self) -> str | None:
        job, spec = self.job, self.spec
        if job.retries_used > spec.max_retries:
            failed = [a for a in job.attempts if a.end_reason is EndReason.WORKER_FAILED]
            last = failed[-1]
            what = f"the worker of node {last.node} failed (exit {last.exit_code})"
            if (last.error_message or "").startswith("setup failed"):  # fold's line for it
                what = f"node {last.node}: {last.error_message}"
            return f"{what} {job.retries_used} times; max_retries is {spec.max_retries}"
        if self.batch and spec.batch is not None:
            dead = job.queue.dead if job.queue is not None else len(job.dead_shards)
            dead = max(dead, len(job.dead_shards))
            allowed = spec.batch.allow_failed_shards
            if dead > allowed:
                shown = ", ".join(job.dead_shards[:20]) + (
                    " …" if len(job.dead_shards) > 20 else ""
                )
                return f"{dead} shards were dead-lettered (allow_failed_shards: {allowed})" + (
                    f": {shown}" if shown else ""
                )
        limit = spec.max_interruptions
        if (
            limit is not None
            and job.interruptions >= limit
            and spec.on_max_interruptions is OnMaxInterruptions.FAIL
        ):
            return f"max_interruptions ({limit}) reached: {job.interruptions} interruptions"
        return stalled(job, self.now, self.p.config)

    def _refused(self) -> str | None:
        """Why the job fails: every provider that could take it refuses it; None while another
        can, an attempt outlives this pass (it ends first) or this pass launches (asked last)."""
        job, out = self.job, self.out
        ending = {a.attempt_id for a in out if isinstance(a, EndAttempt)}
        live = any(a.alive and a.attempt_id not in ending for a in job.attempts)
        if live or not job.refused_by or any(isinstance(a, Launch) for a in out):
            return None
        return None if self.placement.others_can_take() else refusal_reason(job.refused_by)

    def _on_demand_forced(self) -> bool:
        job, limit = self.job, self.spec.max_interruptions
        if job.on_demand_forced:
            return True
        if limit is not None and job.interruptions >= limit:
            self.out.append(
                ForceOnDemand(
                    job.job_id,
                    f"max_interruptions ({limit}) reached: {job.interruptions} interruptions; "
                    "on-demand from now on (on_max_interruptions: on-demand)",
                )
            )
            return True
        return False

    def _finished(self) -> bool:
        """Succeed when the work is done (publishing a batch job's outputs first)."""
        job = self.job
        if self.batch:
            q = job.queue
            drained = job.shards_enqueued and q is not None and q.pending == 0 and q.leased == 0
            if not drained:
                return False
            if not job.outputs_published:
                self.out.append(PublishOutputs(job.job_id))
                self._release_all(EndReason.SUCCEEDED, "released: the queue is drained")
                return True
            self._release_all(EndReason.SUCCEEDED, "released: the job succeeded")
            self._move(JobState.SUCCEEDED, "every shard is done and the outputs are published")
            return True
        if all(job.node_done(n) for n in range(job.node_count)):
            self._release_all(EndReason.SUCCEEDED, "released: every node is done")
            self._move(JobState.SUCCEEDED, "every node's worker finished (exit 0)")
            return True
        return False

    # -- nodes -----------------------------------------------------------------------------

    def _nodes(self) -> list[_Node]:
        boot_of = self.p.snapshot.market.boot_s_of
        blind_response = self.placement.policy.notice_blind(self.placement.situation)
        nodes = []
        for n in range(self.job.node_count):
            attempts = tuple(sorted(self.job.node_attempts(n), key=launch_order))
            node = _Node(n, attempts)
            if not self.batch and self.job.node_done(n):
                for a in attempts:
                    if a.alive:
                        self._end(a, EndReason.TERMINATED, f"node {n} is done", terminate=True)
                nodes.append(node)
                continue
            for a in attempts:
                if not a.alive:
                    continue
                if a.notice_final:
                    lead = None if a.notice_deadline_s is None else a.notice_deadline_s - self.now
                    boot = boot_of(a.provider)
                    if lead is None or lead <= boot:
                        # Too late to make before break: the replacement would boot after it dies.
                        why = (
                            "unknown lead"
                            if lead is None
                            else f"lead {lead:.0f} s ≤ boot {boot:.0f} s"
                        )
                        self._end(a, EndReason.PREEMPTED, f"final notice ({why})", terminate=False)
                        continue
                self._classify(node, a, blind_response)
            nodes.append(node)
        return nodes

    def _classify(self, node: _Node, a: AttemptView, blind_response: NoticeBlindResponse) -> None:
        """A live attempt is healthy, doomed (noticed, notice-blind, in a zone an outage cooled, off
        the deadline policy's kind: replaced make-before-break) or stopped (the policy waits)."""
        node.alive.append(a)
        spot, keep = a.market_kind is MarketKind.SPOT, NoticeBlindResponse.KEEP
        blind = a.notice_blind and spot and blind_response is not keep
        moved = self.p.moved_by_outage(a)
        plan = self.plan
        if plan is not None and plan.stops(a):  # the deadline policy waits: what runs stops
            self.out += plan.stop_actions(a, self.now, self.p.config.stop_grace_s)
            return
        switch = plan is not None and plan.kind is not None and not plan.fits(a)
        if a.state is AttemptState.NOTICED or blind or moved or switch:
            node.doomed.append(a)
            if moved:
                node.moving.append(a)
            elif switch:
                node.switching.append(a)
            if blind and blind_response is NoticeBlindResponse.ON_DEMAND:
                node.blind_on_demand = True
        else:
            node.healthy.append(a)

    def _wanted(self, nodes: list[_Node]) -> list[_Node]:
        """The nodes that should run an instance now (a task's unfinished ones; enough batch workers)."""
        if not self.batch:
            return [n for n in nodes if not self.job.node_done(n.index)]
        q = self.job.queue
        target = len(nodes)
        if self.job.shards_enqueued and q is not None:
            target = min(target, q.pending + q.leased)
        occupied = [n for n in nodes if n.healthy]
        # Nodes to (re)fill, in order: replacements, lost workers, never launched, finished ones.
        rest = sorted(
            (n for n in nodes if not n.healthy),
            key=lambda n: (
                0 if n.alive else 1 if n.ran_before else 2 if not n.attempts else 3,
                n.index,
            ),
        )
        return occupied + rest[: max(0, target - len(occupied))]

    def _handover(self, node: _Node) -> None:
        """With a healthy instance running, the node's other live instances stop (make-before-break)."""
        keeper = node.keeper
        if keeper is None:
            return
        for a in node.healthy:
            if a is not keeper and a.state is AttemptState.RUNNING:
                self._end(
                    a, EndReason.SUPERSEDED, f"node {node.index} runs on {keeper.attempt_id}", True
                )
        grace = self.p.config.stop_grace_s
        for a in node.doomed:
            if a.notice_final and a.instance_id is not None:
                # The cloud takes it at its deadline: left to its emergency save (the agent records
                # the interruption), not stopped; a final notice is an interruption however survived.
                why = f"final notice; its replacement {keeper.attempt_id} runs"
                self._end(a, EndReason.PREEMPTED, why, terminate=False)
                continue
            # Asked to stop when the replacement ran, if the store does not say when it was asked.
            asked = a.stop_requested_at
            since = asked if asked is not None else keeper.running_at
            if a.instance_id is None:
                self._end(a, EndReason.SUPERSEDED, "replaced before it had an instance", False)
            elif since is not None and self.now - since > grace:
                why = f"still up {grace:.0f} s after its replacement {keeper.attempt_id} ran"
                self._end(a, EndReason.SUPERSEDED, why, terminate=True)
            elif asked is None:
                self.out.append(
                    RequestStop(
                        self.job.job_id, a.instance_id, f"its replacement {keeper.attempt_id} runs"
                    )
                )

    def _release_idle(self, nodes: list[_Node]) -> None:
        """A drained batch queue (nothing pending) releases the workers that hold no lease."""
        q, busy = self.job.queue, self.job.busy_instances
        if not self.batch or q is None or not self.job.shards_enqueued or q.pending or busy is None:
            return
        for node in nodes:
            for a in list(node.healthy):
                if a.state is AttemptState.RUNNING and a.instance_id not in busy:
                    self._end(a, EndReason.SUCCEEDED, "released: nothing left to claim", True)
                    node.healthy.remove(a)

    # -- launching -------------------------------------------------------------------------

    def _launch(self, wanted: list[_Node], forced: bool) -> None:
        needy = [n for n in wanted if not n.healthy]
        if not needy:
            return
        if self.plan is not None:
            self._launch_deadline(needy, self.plan)
            return
        placement, ledger = self.placement, self.p.reserved
        alive_markets = [a.market for n in wanted for a in n.healthy]
        groups: dict[bool, list[_Node]] = {}
        for node in needy:
            groups.setdefault(forced or node.blind_on_demand, []).append(node)
        for on_demand_only in sorted(groups):
            options = placement.options(on_demand_only)
            fresh: list[_Node] = []
            for node in groups[on_demand_only]:
                last = node.last
                pool = next((c for c in options.reserved if ledger.take(placement.pools, c)), None)
                if last is not None and last.market_failed:
                    first = (pool,) if pool is not None else ()
                    self._failover(node, first + options.choice.candidates, last)
                    continue
                if pool is not None:
                    self._launch_one(node, (pool,), "reserved capacity first")
                    alive_markets.append(pool.market_id)
                else:
                    fresh.append(node)
            if not fresh:
                continue
            if not options.choice.candidates:
                for node in fresh:
                    self.out.append(Waiting(self.job.job_id, node.index, options.choice.reason))
                continue
            s = self.spec.spread
            picks = spread(
                options.choice.candidates,
                len(fresh),
                s.min_zones,
                s.min_instance_types,
                alive_markets,
            )
            for node, pick in zip(fresh, picks, strict=True):
                self._launch_one(node, (pick,), options.choice.reason)
                alive_markets.append(pick.market_id)

    def _launch_deadline(self, needy: list[_Node], plan: DeadlinePlan) -> None:
        """Launch (or switch, make-before-break) in the market kind the deadline policy chose."""
        candidates = plan.candidates()
        why = plan.reason()
        for node in needy:
            last = node.last
            if not candidates:
                self.out.append(Waiting(self.job.job_id, node.index, why))
            elif last is not None and last.market_failed:
                self._failover(node, candidates, last)
            else:
                self._launch_one(node, candidates[:1], why)

    def _failover(self, node: _Node, candidates: tuple[Candidate, ...], last: AttemptView) -> None:
        k = self.p.config.failover_k
        chosen = tuple(candidates[:k])
        code = f" ({last.error_code})" if last.error_code else ""
        if not chosen:
            why = f"launch failed in {last.market.slug}{code} and no other candidate is usable now"
            self.out.append(Waiting(self.job.job_id, node.index, why))
            return
        why = (
            f"failover: launch failed in {last.market.slug}{code}; {len(chosen)} candidates at once"
        )
        self._launch_one(node, chosen, why, parallel=True)

    def _launch_one(
        self, node: _Node, candidates: tuple[Candidate, ...], why: str, parallel: bool = False
    ) -> None:
        replaces = max(node.doomed, key=launch_order) if node.doomed else None
        last = node.last
        if replaces is not None:
            blind = replaces.notice_blind and replaces.state is not AttemptState.NOTICED
            lead = "notice-blind" if blind else "make-before-break"
            if replaces in node.moving:
                lead = f"zone outage in {replaces.zone}: make-before-break"
            elif replaces in node.switching:
                lead = f"switch off {replaces.market_kind.value}: make-before-break"
            why = f"{lead}: replacing {replaces.attempt_id}; {why}"
            if blind and replaces.instance_id:
                self.out.append(
                    RequestCheckpoint(
                        self.job.job_id, replaces.instance_id, "notice-blind: replaced"
                    )
                )
        elif last is not None and last.end_reason not in _LAUNCH_ENDS:
            ended = last.end_reason.value if last.end_reason else last.state.value
            why = f"recovering node {node.index} ({last.attempt_id} {ended}); {why}"
        token = self.next_token()
        self.out.append(
            Launch(
                self.job.job_id,
                node.index,
                tuple(candidates),
                token,
                why,
                parallel=parallel,
                replaces=replaces.attempt_id if replaces else None,
            )
        )

    # -- the job's state -------------------------------------------------------------------

    def _settle_state(self, nodes: list[_Node], wanted: list[_Node]) -> None:
        running = [n for n in wanted if n.serving]
        recovering = [n for n in wanted if not n.serving and n.ran_before]
        if recovering:
            n = recovering[0]
            last = n.last
            detail = (
                f" ({last.attempt_id} {last.end_reason.value})" if last and last.end_reason else ""
            )
            target, why = JobState.RECOVERING, f"node {n.index} lost its instance{detail}"
        elif wanted and (len(running) == len(wanted) or (self.batch and running)):
            target, why = JobState.RUNNING, f"{len(running)} of {len(wanted)} nodes run"
        elif self.launched or any(n.alive for n in nodes):
            target, why = JobState.PROVISIONING, "launches under way"
        else:
            target, why = JobState.PENDING, "nothing could be launched now: waiting for capacity"
        self._move(target, why)

    def _move(self, target: JobState, why: str) -> None:
        why += deadline_missed(self.job, self.now, target)
        for state in job_state_path(self.job.state, target):
            self.out.append(SetJobState(self.job.job_id, state, why))
