"""Stand-ins for the types other parts of issue G own, until theirs land on main.

TODO(g-decide): each block is replaced by an import from its owner's module
as soon as that module is on main (``jobs.lifecycle`` from g-store,
``jobs.spec`` from g-spec, ``scheduler.*`` from g-place); the names and values
are the contract's, so the switch changes no caller. The specification and
placement types are Protocols, so the real classes satisfy them structurally.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from spothop.resources.market_id import MarketId
from spothop.resources.offering import Offering


class JobState(StrEnum):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    RECOVERING = "recovering"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


_S = JobState
TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    _S.PENDING: frozenset({_S.PROVISIONING, _S.FAILED, _S.CANCELLED}),
    _S.PROVISIONING: frozenset({_S.RUNNING, _S.RECOVERING, _S.FAILED, _S.CANCELLED}),
    _S.RUNNING: frozenset({_S.RECOVERING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED}),
    _S.RECOVERING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
}


def is_legal(a: JobState, b: JobState) -> bool:
    return b in TRANSITIONS[a]


class AttemptState(StrEnum):
    LAUNCHING = "launching"
    PENDING = "pending"
    RUNNING = "running"
    NOTICED = "noticed"
    ENDED = "ended"


class EndReason(StrEnum):
    PREEMPTED = "preempted"
    TERMINATED = "terminated"
    FAILED = "failed"
    LAUNCH_FAILED = "launch_failed"
    SUCCEEDED = "succeeded"
    WORKER_FAILED = "worker_failed"
    ORPHAN = "orphan"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


class MarketKind(StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"
    RESERVED = "reserved"


class JobKind(StrEnum):
    TASK = "task"
    BATCH = "batch"


# -- the job spec, as decide reads it (g-spec's JobSpec satisfies this) ----------------------


class SpreadLike(Protocol):
    @property
    def min_zones(self) -> int: ...
    @property
    def min_instance_types(self) -> int: ...


class BatchLike(Protocol):
    @property
    def allow_failed_shards(self) -> int: ...


class JobSpec(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def workers(self) -> int: ...
    @property
    def market(self) -> str: ...
    @property
    def tolerance(self) -> str: ...
    @property
    def max_interruptions(self) -> int | None: ...
    @property
    def on_max_interruptions(self) -> str: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def spread(self) -> SpreadLike | None: ...
    @property
    def reserved(self) -> Sequence[Any]: ...
    @property
    def batch(self) -> BatchLike | None: ...
    def requirements(self) -> Any: ...


# -- placement, as decide reads it (g-place's types satisfy this) ----------------------------


class Candidate(Protocol):
    @property
    def offering(self) -> Offering: ...
    @property
    def market_kind(self) -> str: ...
    @property
    def price_usd_per_hour(self) -> float: ...
    @property
    def preemption_rate_per_h(self) -> float: ...
    @property
    def score(self) -> float: ...
    @property
    def market_id(self) -> MarketId: ...


class MarketView(Protocol):
    @property
    def now(self) -> float: ...
    @property
    def boot_s(self) -> Mapping[str, float]: ...
