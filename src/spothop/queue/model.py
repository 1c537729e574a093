"""The queue's data: shards, leases, policies and statistics (frozen, units in names)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from spothop.queue.errors import MalformedShardError

# A shard id doubles as an object name in the output store, so it is kept to
# characters that are safe in a file name and an S3 key on every platform.
SHARD_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=-]{0,199}$")
JOB_NAME_PATTERN = SHARD_ID_PATTERN

# A payload is a description of work (a URI, a byte range), not the data itself.
MAX_PAYLOAD_BYTES = 64 * 1024

DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_BACKOFF_BASE_S = 1.0
DEFAULT_BACKOFF_MAX_S = 300.0
DEFAULT_LEASE_S = 60.0


class ShardState(StrEnum):
    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    DEAD = "dead"


@dataclass(frozen=True)
class Shard:
    """A unit of work to enqueue: an id unique in its job, and a JSON payload (often a URI)."""

    id: str
    payload: Any


@dataclass(frozen=True)
class QueuePolicy:
    """How a job retries: ``max_attempts`` claims at most, exponential backoff after a failure.

    The backoff after the k-th failed attempt is ``backoff_base_s * 2**(k-1)``,
    capped at ``backoff_max_s``; no jitter, so a retry time can be predicted.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base_s: float = DEFAULT_BACKOFF_BASE_S
    backoff_max_s: float = DEFAULT_BACKOFF_MAX_S

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise MalformedShardError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise MalformedShardError("backoff_base_s and backoff_max_s must not be negative")

    def backoff_s(self, attempts: int) -> float:
        """Seconds to wait before the next attempt, after ``attempts`` attempts so far."""
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** max(attempts - 1, 0)))


@dataclass(frozen=True)
class Lease:
    """The right to work on one shard until ``expires_at`` (epoch seconds, the queue's clock).

    ``token`` is the fencing token: it grows by one at every claim of the shard,
    and only the newest token, before its expiry, can complete, fail, release or
    heartbeat. ``attempt`` is the attempt number this claim counts as.
    """

    job: str
    shard_id: str
    payload: Any
    token: int
    worker: str
    expires_at: float
    attempt: int


@dataclass(frozen=True)
class Completion:
    """The outcome of a successful ``complete``.

    ``first`` is true for the call that moved the shard to done, false for a
    repeat of the same complete (same lease, same output): completion is idempotent.
    """

    shard_id: str
    token: int
    output_ref: str
    first: bool


@dataclass(frozen=True)
class ShardRecord:
    """Everything the queue knows about one shard."""

    id: str
    payload: Any
    state: ShardState
    token: int
    attempts: int
    failures: int
    releases: int
    output_ref: str | None
    last_error: str | None
    worker: str | None = None  # who holds the lease, while the shard is leased

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (``state`` as its value)."""
        return {**asdict(self), "state": self.state.value}


@dataclass(frozen=True)
class QueueStats:
    """Counts for one job. ``attempts`` counts claims that consumed an attempt.

    ``leased`` includes leases that expired and are waiting to be reclaimed;
    ``releases`` counts preemptions (explicit releases, which refund their
    attempt); ``reclaims`` counts expired leases taken over by another claim.
    """

    job: str
    pending: int
    leased: int
    done: int
    dead: int
    attempts: int
    failures: int
    releases: int
    reclaims: int

    @property
    def total(self) -> int:
        return self.pending + self.leased + self.done + self.dead

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "pending": self.pending,
            "leased": self.leased,
            "done": self.done,
            "dead": self.dead,
            "total": self.total,
            "attempts": self.attempts,
            "failures": self.failures,
            "releases": self.releases,
            "reclaims": self.reclaims,
        }


def check_job_name(job: str) -> str:
    if not isinstance(job, str) or not JOB_NAME_PATTERN.match(job):
        raise MalformedShardError(
            f"job name {job!r} is not valid: use 1-200 letters, digits and . _ : = - (starting alphanumeric)"
        )
    return job


def check_shard(shard: Shard) -> str:
    """The shard's payload as JSON text; :class:`MalformedShardError` names what is wrong."""
    if not isinstance(shard.id, str) or not SHARD_ID_PATTERN.match(shard.id):
        raise MalformedShardError(
            f"shard id {shard.id!r} is not valid: use 1-200 letters, digits and . _ : = - (starting alphanumeric)"
        )
    try:
        text = json.dumps(shard.payload, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MalformedShardError(
            f"shard {shard.id!r}: payload is not JSON-serialisable: {exc}"
        ) from exc
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise MalformedShardError(
            f"shard {shard.id!r}: payload is {len(text.encode())} bytes, over {MAX_PAYLOAD_BYTES}; "
            "put the data in the object store and enqueue its URI"
        )
    return text


def decode_payload(job: str, shard_id: str, text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedShardError(
            f"job {job!r} shard {shard_id!r}: stored payload is not JSON: {exc}"
        ) from exc
