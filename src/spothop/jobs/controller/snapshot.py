"""What :func:`~spothop.jobs.controller.decide.decide` sees: one frozen snapshot of the world.

The observer (``jobs/controller/observe.py``) builds a :class:`Snapshot` from
the job store (jobs, their attempts, cooldowns), the providers
(``list_instances``, by tag), the agents' events recorded after the
controller's cursor, the queue's stats per batch job and the market
(:func:`spothop.scheduler.market_view.gather_market_view`). ``decide`` reads
nothing else: no clock (``now`` is the snapshot's), no I/O, so the same
snapshot always gives the same actions, on real clouds, on the local cloud
and in ``spothop simulate`` on a virtual clock.

Contract for whoever builds one:

- ``jobs`` holds every job that is not terminal, plus terminal ones that
  still own a live instance (so it is terminated); each with **all** its
  attempts, oldest first (``decide`` derives interruptions, retries and failed
  markets from them).
- ``instances`` holds what the providers listed, keyed by instance id,
  spothop-tagged instances included whether or not an attempt names them;
  ``listed_providers`` names the providers whose listing succeeded this pass:
  an instance missing from a provider that did not answer is *unknown*, not
  gone, and ``decide`` never ends an attempt for it.
- ``events`` are the agents' typed events since the cursor, oldest first.
  ``decide`` folds them into the attempts they are about (by instance id) and
  returns the :class:`~spothop.jobs.controller.actions.UpdateAttempt` /
  ``EndAttempt`` actions that persist them, so once they are carried out the
  next snapshot needs the events no more (the cursor may advance).
- ``controller_started_at`` is when the observing controller started: every
  launch it makes stores its attempt later, so an attempt still ``launching``
  from before is one a dead controller never finished (``None``: unknown).
- ``reservations`` are the reserved pools every provider with the
  ability lists (``ReservedCapacity.list_reservations``, ``in_use`` counted
  when read): the pools the user owns, which ``decide`` fills first.
- ``spot_runs`` holds each spot market's availability runs up to ``now``
  (:class:`~spothop.jobs.controller.spot_runs.SpotRuns`, on the snapshot's
  clock); never anything after ``now``.
- ``cooldowns`` maps a market (or a zone: ``instance_type == ""``) to the
  unix time its cooldown ends; expired ones may be left in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from spothop.jobs.controller.spot_runs import SpotRuns
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, interrupted, refused_where
from spothop.jobs.records import AttemptRecord
from spothop.jobs.spec import JobSpec
from spothop.providers.base import Instance
from spothop.providers.reservations import Reservation
from spothop.queue.model import QueueStats
from spothop.resources.market_id import MarketId
from spothop.scheduler.market_view import MarketKind, MarketView
from spothop.wire.contract import CONTROL_PLANE_PROTOCOL as _CONTROL_PLANE_PROTOCOL
from spothop.wire.events import AgentEvent

TAG_JOB = (
    "spothop-job"  # the tags every launch carries (written to the store before the launch call)
)
TAG_NODE = "spothop-node"
TAG_TOKEN = "spothop-token"
CONTROL_PLANE_PROTOCOL = _CONTROL_PLANE_PROTOCOL  # an agent's report of the control plane's stop
# The error code of a launch the controller that made it stopped in (fold.py): the market did
# not refuse it, so it is neither left out for a while nor failed over from.
LAUNCH_CUT = "launch_cut"


@dataclass(frozen=True)
class AgentFacts:
    """What the agent on one instance said, folded from all its events (not only the new ones):
    :func:`spothop.jobs.controller.events.agent_facts`."""

    noticed_at: float | None = None
    notice_final: bool = False
    notice_deadline_s: float | None = None
    notice_blind: bool = False
    exit_code: int | None = None
    worker_phase: str = ""  # the part of the job's command its worker exited in (setup, run)
    notice_by_controller: bool = False  # the final notice was the control plane's stop request
    # Its agent's registration or latest heartbeat (the agent's clock: the wall); None: it never
    # registered (agent_heartbeats holds no row for the instance).
    beat_at: float | None = None


@dataclass(frozen=True)
class AttemptView:
    """One instance attempt of one node, as the store holds it (times in unix seconds).

    The store's :class:`~spothop.jobs.records.AttemptRecord` as ``decide`` reads it
    (:meth:`of`): its times on the snapshot's clock, and what its agent said
    (:class:`AgentFacts`) folded in. ``decide``'s own fold updates a view with
    :meth:`with_`; nothing else builds one field by field.
    """

    attempt_id: str
    job_id: str
    node: int
    launch_token: str
    provider: str
    region: str
    zone: str | None
    instance_type: str
    market_kind: MarketKind
    price_usd_per_hour: float
    state: AttemptState
    launched_at: float
    instance_id: str | None = None
    running_at: float | None = None
    noticed_at: float | None = None
    notice_final: bool = False  # False: an advance notice (or none yet)
    notice_deadline_s: float | None = None  # when the cloud takes it, where the notice says
    notice_blind: bool = False  # its agent said it may miss a notice
    ended_at: float | None = None
    end_reason: EndReason | None = None
    exit_code: int | None = None
    worker_phase: str = ""  # its worker exited in setup or run (AgentFacts.worker_phase)
    error_code: str | None = None  # the cloud's own code, for a failed launch (or LAUNCH_CUT)
    error_message: str | None = None  # the cloud's own message, for a failed launch
    stop_requested_at: float | None = None  # when a RequestStop for it was carried out
    # Its final notice is its agent's report of the controller's own stop request (protocol
    # ``control-plane``), not the cloud's: a grouped task's node stopped with its group.
    notice_by_controller: bool = False
    # The cloud's own final notice, as the store holds it (AttemptRecord.notice_final, which the
    # observer wrote this pass from the same events): what every surface counts.
    notice_cloud: bool = False
    generation: int = 0  # a grouped task's group generation (docs/multinode.md)
    group_nnodes: int | None = None  # that generation's node count; None: not a group attempt
    beat_at: float | None = None  # its agent's latest heartbeat (AgentFacts.beat_at)
    # Its provider's clock seconds per controller second (a simulated cloud's ``speed``): a span
    # of it on the snapshot's clock times this is the provider's span, which the provider bills.
    clock_rate: float = 1.0

    @classmethod
    def of(
        cls,
        record: AttemptRecord,
        facts: AgentFacts | None = None,
        stop_requested_at: float | None = None,
        clock_offset_s: float = 0.0,
        clock_rate: float = 1.0,
        now: float = 0.0,
    ) -> AttemptView:
        """The view of a stored attempt; its stored times (the provider's clock) moved onto the
        snapshot's clock (``now``) like the agents' facts: a time ``x`` provider seconds before the
        provider's now (``now + clock_offset_s``) reads ``x / clock_rate`` seconds before ``now``,
        so spans (work done, boot, notice) are controller seconds, on an accelerated cloud too."""

        def moved(t: float) -> float:
            if clock_rate == 1.0:
                return t - clock_offset_s
            return now - (now + clock_offset_s - t) / clock_rate

        def shown(t: float | None) -> float | None:
            return None if t is None else moved(t)

        f = facts or AgentFacts()
        return cls(
            attempt_id=record.attempt_id,
            job_id=record.job_id,
            node=record.node,
            launch_token=record.launch_token,
            provider=record.provider,
            region=record.region,
            zone=record.zone or None,
            instance_type=record.instance_type,
            market_kind=MarketKind(str(record.market_kind)),
            price_usd_per_hour=record.price_usd_per_hour,
            state=AttemptState(str(record.state)),
            launched_at=moved(record.launched_unix_s),
            instance_id=record.instance_id,
            running_at=shown(record.running_unix_s),
            noticed_at=shown(record.noticed_unix_s) or f.noticed_at,
            notice_final=record.notice_final or f.notice_final,
            notice_deadline_s=f.notice_deadline_s,
            notice_blind=f.notice_blind,
            ended_at=shown(record.ended_unix_s),
            end_reason=None if record.end_reason is None else EndReason(str(record.end_reason)),
            exit_code=record.exit_code if record.exit_code is not None else f.exit_code,
            worker_phase=f.worker_phase,
            error_code=record.error_code,
            error_message=record.error_message,
            stop_requested_at=stop_requested_at,
            notice_by_controller=f.notice_by_controller,
            notice_cloud=record.notice_final,
            generation=record.generation,
            group_nnodes=record.group_nnodes,
            beat_at=f.beat_at,
            clock_rate=clock_rate,
        )

    @property
    def market(self) -> MarketId:
        return MarketId.of(self.provider, self.region, self.zone, self.instance_type)

    @property
    def market_failed(self) -> bool:
        """Its launch failed in its market: not one a stopped controller cut short (LAUNCH_CUT)."""
        return self.end_reason is EndReason.LAUNCH_FAILED and self.error_code != LAUNCH_CUT

    @property
    def refused(self) -> bool:
        """Its provider refused the launch for a reason that repeats on every launch there (or,
        ``region_refused``, on every launch in its region)."""
        return self.end_reason in (EndReason.LAUNCH_REFUSED, EndReason.REGION_REFUSED)

    @property
    def refused_where(self) -> str | None:
        """Where the refusal holds (:func:`~spothop.jobs.lifecycle.refused_where`); None: not refused."""
        if not self.refused:
            return None
        region = self.region if self.end_reason is EndReason.REGION_REFUSED else None
        return refused_where(self.provider, region)

    @property
    def ended(self) -> bool:
        return self.state is AttemptState.ENDED

    @property
    def alive(self) -> bool:
        """Not ended: launching, booting, running or noticed."""
        return not self.ended

    @property
    def interrupted(self) -> bool:
        """The cloud took it back, or gave it a final notice, whatever ended it after; an advance
        notice alone, or its agent's report of the controller's own stop, does not count (the one
        rule: :func:`~spothop.jobs.lifecycle.interrupted`)."""
        cloud = self.notice_cloud or (self.notice_final and not self.notice_by_controller)
        return interrupted(self.end_reason, cloud)

    @property
    def interrupted_at(self) -> float | None:
        if not self.interrupted:
            return None
        return self.noticed_at if self.noticed_at is not None else self.ended_at

    def with_(self, **changes: Any) -> AttemptView:  # dataclasses.replace's own keywords
        return replace(self, **changes)


@dataclass(frozen=True)
class JobView:
    """One job: its spec, its state and every attempt it made, oldest first.

    ``shards_enqueued``/``outputs_published`` and ``cancel_requested`` are the
    store's record of those steps (job events or columns); ``queue`` is the
    batch queue's stats, ``None`` for a task job or before its shards exist;
    ``dead_shards`` and ``busy_instances`` come from the queue's records (a
    lease's worker is the agent's worker id, mapped to its instance).
    """

    job_id: str
    spec: JobSpec
    state: JobState
    attempts: tuple[AttemptView, ...] = ()
    created_at: float = 0.0
    on_demand_forced: bool = False
    cancel_requested: bool = False
    queue: QueueStats | None = None
    shards_enqueued: bool = False
    outputs_published: bool = False
    dead_shards: tuple[str, ...] = ()  # the ids of its dead-lettered shards
    # Instances whose worker holds a shard lease now (None: not known, so none is released early).
    busy_instances: frozenset[str] | None = None
    reason: str = ""

    @cached_property
    def interruptions(self) -> int:
        return sum(1 for a in self.attempts if a.interrupted)

    @cached_property
    def interruption_times(self) -> tuple[float, ...]:
        """When each interruption happened, oldest first."""
        return tuple(sorted(t for a in self.attempts if (t := a.interrupted_at) is not None))

    @cached_property
    def retries_used(self) -> int:
        """Worker failures so far (attempts that ended ``worker_failed``)."""
        return sum(1 for a in self.attempts if a.end_reason is EndReason.WORKER_FAILED)

    @property
    def node_count(self) -> int:
        """Task jobs: ``num_nodes``; batch jobs: ``workers``."""
        return self.spec.node_count

    def node_attempts(self, node: int) -> tuple[AttemptView, ...]:
        return self._by_node.get(node, ())

    @cached_property
    def _by_node(self) -> dict[int, tuple[AttemptView, ...]]:
        """Derived values are cached on first use: a view is frozen, and ``with_`` makes a new one."""
        out: dict[int, list[AttemptView]] = {}
        for a in self.attempts:
            out.setdefault(a.node, []).append(a)
        return {node: tuple(found) for node, found in out.items()}

    @cached_property
    def refused_by(self) -> dict[str, AttemptView]:
        """Provider (or provider in a region, :func:`~spothop.jobs.lifecycle.refused_where`) →
        the newest attempt it refused (:attr:`AttemptView.refused`): this job launches there no
        more; a configuration or credentials error repeats on every candidate of the provider, a
        region not enabled on every candidate in that region."""
        out: dict[str, AttemptView] = {}
        for a in self.attempts:
            where = a.refused_where
            if where is not None:
                out[where] = a
        return out

    def refuses(self, market: MarketId) -> bool:
        """Whether ``market``'s provider, or that provider in its region, refused this job."""
        refused = self.refused_by
        return bool(refused) and (
            market.provider in refused or refused_where(market.provider, market.region) in refused
        )

    def node_done(self, node: int) -> bool:
        return any(a.end_reason is EndReason.SUCCEEDED for a in self.node_attempts(node))

    def with_(self, **changes: Any) -> JobView:  # dataclasses.replace's own keywords
        return replace(self, **changes)


@dataclass(frozen=True)
class Snapshot:
    """Everything one ``decide`` pass reads (see the module docstring for the contract)."""

    now: float
    jobs: tuple[JobView, ...]
    market: MarketView
    cooldowns: Mapping[MarketId, float] = field(default_factory=dict)
    instances: Mapping[str, Instance] = field(default_factory=dict)
    listed_providers: frozenset[str] = frozenset()
    # (job, node) pairs whose launch call this controller has in flight (read before the
    # observe): such an attempt is being made, whatever its clock-moved launch time says.
    launching: frozenset[tuple[str, int]] = frozenset()
    # Provider → why its listing failed this pass (unread.py); it is then not in listed_providers.
    provider_errors: Mapping[str, str] = field(default_factory=dict)
    events: tuple[AgentEvent, ...] = ()
    # When the controller that observed this started (None: unknown). An attempt still
    # launching that was stored before then cannot be in this controller's launch call:
    # its controller died mid-launch.
    controller_started_at: float | None = None
    reservations: tuple[Reservation, ...] = ()  # every provider's reserved pools, in_use as listed
    # A replica's jobs: job id → since when it holds the job's lease (controller clock). An attempt
    # still launching that was stored before then was another controller's launch (as above).
    held_since: Mapping[str, float] = field(default_factory=dict)
    # Each spot market's availability runs as the observer saw them (spot_runs.py): how long spot
    # has been up or down, for the deadline policies; empty: nothing seen before this pass.
    spot_runs: Mapping[MarketId, SpotRuns] = field(default_factory=dict)
    # Provider → its boot deadline on the snapshot's clock (liveness.py): an instance of it whose
    # agent has not registered this long after the launch is lost. A provider not named here is
    # not watched (a simulation: no agents), nor are its agents' heartbeats.
    boot_deadlines_s: Mapping[str, float] = field(default_factory=dict)

    def started_for(self, job_id: str) -> float | None:
        """Since when this controller runs ``job_id``: its start, or (a replica) when it took the job."""
        since = self.held_since.get(job_id)
        if since is None:
            return self.controller_started_at
        if self.controller_started_at is None:
            return since
        return max(since, self.controller_started_at)

    def cooled(self, market: MarketId) -> bool:
        """True while ``market`` or its whole zone is cooling down."""
        zone = MarketId(market.provider, market.region, market.zone, "")
        return any(self.cooldowns.get(m, float("-inf")) > self.now for m in (market, zone))
