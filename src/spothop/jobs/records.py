"""What the job store hands out: frozen records of jobs, nodes, attempts, events and cooldowns, and its errors.

:mod:`spothop.jobs.store` writes and reads them; every record has ``to_dict()``
(the JSON form the CLI prints with ``--json``). Times are unix seconds.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from spothop.jobs.lifecycle import AttemptState, EndReason, JobState, NodeState, interrupted
from spothop.resources.market_id import MarketId
from spothop.state.job_tables import job_attempts

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec


class StorableSpec(Protocol):
    """What the store needs of a job spec (:class:`spothop.jobs.spec.JobSpec` is one)."""

    @property
    def name(self) -> str: ...

    def to_json(self) -> str: ...


@dataclass(frozen=True)
class JobLease:
    """A controller's lease on one job (:meth:`JobStore.claim_jobs`); pass it to writes to fence them."""

    job_id: str
    token: int
    owner: str
    expires_unix_s: float


class LeaseCensus(NamedTuple):
    """Other controllers' leases on the jobs that need one, as one replica sees them
    (:meth:`JobStore.lease_census`)."""

    lapsed: int
    """Jobs whose holder (not this replica) let the lease lapse: a dead or stopped replica's."""
    holders: int
    """Other replicas holding a live lease."""
    next_lapse_unix_s: float | None = None
    """When the first of those live leases lapses unless renewed (None: no live lease)."""


def mount_sha256s(mounts_json: str | None) -> frozenset[str]:
    """The sha256s of a job's uploaded mounts, from its ``mounts_json``
    (:mod:`spothop.controlplane.mounts`)."""
    if not mounts_json:
        return frozenset()
    return frozenset(m["sha256"] for m in json.loads(mounts_json) if m.get("sha256"))


@dataclass(frozen=True)
class JobRecord:
    """One job as stored. ``spec_json`` is the spec's JSON; :meth:`spec` parses it."""

    job_id: str
    name: str
    kind: str
    spec_json: str
    state: JobState
    created_unix_s: float
    updated_unix_s: float
    interruptions: int
    retries_used: int
    on_demand_forced: bool
    reason: str
    version: int
    lease_owner: str | None = None
    nodes: tuple[NodeRecord, ...] = ()
    code_sha256: str | None = None  # the packed workdir the agents fetch; None: no workdir
    # The file mounts as planned at launch (spothop.controlplane.mounts), JSON; None: none.
    mounts_json: str | None = None

    @property
    def mount_sha256s(self) -> frozenset[str]:
        """The sha256s of the job's uploaded mounts: the other archives its agents may fetch."""
        return mount_sha256s(self.mounts_json)

    def spec(self) -> JobSpec:
        """The :class:`spothop.jobs.spec.JobSpec` (parsed on each call)."""
        # Imported when asked: the spec module loads pydantic, and the store's readers rarely need it.
        spec_module = importlib.import_module("spothop.jobs.spec")
        spec: JobSpec = spec_module.JobSpec.from_json(self.spec_json)
        return spec

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "kind": self.kind,
            "state": str(self.state),
            "created_unix_s": self.created_unix_s,
            "updated_unix_s": self.updated_unix_s,
            "interruptions": self.interruptions,
            "retries_used": self.retries_used,
            "on_demand_forced": self.on_demand_forced,
            "reason": self.reason,
            "version": self.version,
            "nodes": [n.to_dict() for n in self.nodes],
        }


@dataclass(frozen=True)
class NodeRecord:
    """One node (task) or worker (batch) of a job, numbered from 0."""

    job_id: str
    node: int
    state: NodeState
    updated_unix_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "state": str(self.state), "updated_unix_s": self.updated_unix_s}


@dataclass(frozen=True)
class AttemptRecord:
    """One instance launched (or being launched) for one node of a job."""

    attempt_id: str
    job_id: str
    node: int
    launch_token: str
    provider: str
    region: str
    zone: str
    instance_type: str
    market_kind: str
    price_usd_per_hour: float
    instance_id: str | None
    state: AttemptState
    launched_unix_s: float
    running_unix_s: float | None
    noticed_unix_s: float | None
    ended_unix_s: float | None
    end_reason: EndReason | None
    error_code: str | None
    error_message: str | None
    exit_code: int | None
    # A grouped task's attempts (docs/multinode.md): the group generation it was launched in,
    # and the generation's node count (None: not a group attempt).
    generation: int = 0
    group_nnodes: int | None = None
    group_nproc_per_node: int | None = None  # the generation's processes per node (its GPUs)
    # The cloud gave its instance a final notice (not an advance notice alone, nor the control
    # plane's own stop request): the controller's observer stores it from its agent's events.
    notice_final: bool = False

    @property
    def interrupted(self) -> bool:
        """The cloud took it, or gave it a final notice (:func:`~spothop.jobs.lifecycle.interrupted`)."""
        return interrupted(self.end_reason, self.notice_final)

    @property
    def market_id(self) -> MarketId:
        return MarketId(self.provider, self.region, self.zone, self.instance_type)

    @property
    def live(self) -> bool:
        return self.state is not AttemptState.ENDED

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _ATTEMPT_COLUMNS}
        out["state"] = str(self.state)
        out["end_reason"] = None if self.end_reason is None else str(self.end_reason)
        return out


_ATTEMPT_COLUMNS = tuple(c.name for c in job_attempts.columns)


@dataclass(frozen=True)
class JobEvent:
    """One event of one job; ``seq`` orders every job's events (ascending, gaps possible)."""

    seq: int
    job_id: str
    time_unix_s: float
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "job_id": self.job_id,
            "time_unix_s": self.time_unix_s,
            "kind": self.kind,
            "data": dict(self.data),
        }


@dataclass(frozen=True)
class Cooldown:
    """A market kept out of placement until ``until_unix_s``, and why."""

    market: MarketId
    until_unix_s: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "market": self.market.to_dict(),
            "until_unix_s": self.until_unix_s,
            "reason": self.reason,
        }


def node_count(spec: object) -> int:
    """How many nodes a spec asks for: ``workers`` for a batch job, else ``num_nodes`` (default 1);
    a spec that knows its own count (``JobSpec.node_count``: a re-formable job's ``max_nodes``) says."""
    own = getattr(spec, "node_count", None)
    if isinstance(own, int) and not isinstance(own, bool) and own >= 1:
        return own
    kind = str(getattr(spec, "kind", "task"))
    count = getattr(spec, "workers", None) if kind == "batch" else getattr(spec, "num_nodes", None)
    return int(count) if count else 1
