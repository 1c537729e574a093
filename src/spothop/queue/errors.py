"""The shard queue's errors, all under :class:`spothop.errors.SpothopError`.

::

    SpothopError
    ├── ConfigError
    │   ├── UnknownJobError         no queue (job) of that name was ever created (exit 3)
    │   ├── MalformedShardError     a shard id or payload that cannot be stored or read back
    │   └── BatchSpecError          a batch job spec that does not validate (names the field)
    └── QueueError                  the shard queue refused an operation
        ├── UnknownLeaseError       a lease for a shard the job does not have (exit 3)
        ├── LeaseLost               the lease expired or another worker holds the shard now
        ├── AlreadyCompletedError   a second complete of one lease with a different output
        └── QueueUnavailableError   the backend stayed unreachable through every retry (exit 4)
"""

from __future__ import annotations

from spothop.errors import (
    EXIT_NOT_FOUND,
    EXIT_UNAVAILABLE,
    ConfigError,
    NotFoundError,
    SpothopError,
)


class QueueError(SpothopError):
    """The shard queue refused an operation; the message says which shard and why."""


class UnknownJobError(ConfigError, NotFoundError):
    """No queue of that name exists (nothing was ever enqueued under it)."""

    exit_code = EXIT_NOT_FOUND

    def __init__(self, job: str) -> None:
        self.job = job
        super().__init__(f"unknown job {job!r}: nothing was ever enqueued under that name")


class MalformedShardError(ConfigError):
    """A shard id or payload that cannot be stored (or a stored payload that does not parse)."""


class BatchSpecError(ConfigError):
    """A batch job spec that does not validate; every line names the field and what was expected."""


class UnknownLeaseError(QueueError, NotFoundError):
    """A lease (or a ``dead --retry``) names a shard that its job does not have."""

    exit_code = EXIT_NOT_FOUND

    def __init__(self, job: str, shard_id: str) -> None:
        self.job = job
        self.shard_id = shard_id
        super().__init__(
            f"job {job!r} has no shard {shard_id!r}: the lease is not one of this queue's"
        )


class LeaseLost(QueueError):
    """The lease is no longer valid: it expired, or the shard was claimed again since.

    The caller must stop working on the shard and must not publish anything
    for it; whatever it wrote under its temporary name is garbage.
    """

    def __init__(self, job: str, shard_id: str, token: int, why: str) -> None:
        self.job = job
        self.shard_id = shard_id
        self.token = token
        super().__init__(
            f"lease on shard {shard_id!r} of job {job!r} (token {token}) is lost: {why}"
        )


class AlreadyCompletedError(QueueError):
    """The lease already completed its shard with another output; a complete is not an update."""

    def __init__(self, job: str, shard_id: str, recorded: str, offered: str) -> None:
        self.job = job
        self.shard_id = shard_id
        super().__init__(
            f"shard {shard_id!r} of job {job!r} is already complete with output {recorded!r}; "
            f"a second complete with {offered!r} is refused"
        )


class QueueUnavailableError(QueueError):
    """The backend (PostgreSQL, Redis, SQLite file) stayed unreachable through every retry."""

    exit_code = EXIT_UNAVAILABLE
