"""The job store's errors (exported from the package root like every spothop error).

::

    SpothopError
    ├── IllegalTransition   a state change the lifecycle table does not allow      exit 1
    ├── JobChanged          a write on a job's version that someone wrote since    exit 1
    ├── JobLeaseLost        a write under a controller lease that no longer holds  exit 1
    ├── JobFinished         asked of a job in a final state (cancel a finished job) exit 1
    └── NotFoundError
        ├── JobNotFound     no job with that id in the store                       exit 3
        └── AttemptNotFound no attempt with that id                                exit 3
"""

from __future__ import annotations

from spothop.errors import NotFoundError, SpothopError


class IllegalTransition(SpothopError):
    """A state change the lifecycle table does not allow (a bug, or a race another writer won).

    ``what`` says whose ("job j-3f9a2c", "attempt a-…"); ``current`` and
    ``requested`` are the two states, ``allowed`` where ``current`` may go
    (empty: it is final).
    """

    def __init__(self, what: str, current: str, requested: str, allowed: str = "") -> None:
        self.what = what
        self.current = current
        self.requested = requested
        if current == requested:
            why = f"it already is {current}"
        else:
            why = f"{current} may move only to {allowed or 'nothing (it is final)'}"
        super().__init__(f"{what}: cannot move from {current} to {requested}: {why}")


class JobNotFound(NotFoundError):
    """No job with that id in the store (exit 3)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id!r} in the store (`spothop jobs` lists them)")


class AttemptNotFound(NotFoundError):
    """No attempt with that id in the store (exit 3)."""

    def __init__(self, attempt_id: str) -> None:
        self.attempt_id = attempt_id
        super().__init__(f"no attempt {attempt_id!r} in the store")


class JobChanged(SpothopError):
    """A write conditional on a job's version found the row written since: read it again."""

    def __init__(self, job_id: str, expected: int, found: int) -> None:
        self.job_id = job_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"job {job_id}: written by someone else since version {expected} (now {found})"
        )


class JobLeaseLost(SpothopError):
    """A write under a controller lease that no longer holds (expired, or claimed by another)."""

    def __init__(self, job_id: str, token: int | None) -> None:
        self.job_id = job_id
        self.token = token
        if token is None:
            super().__init__(f"job {job_id}: this controller holds no lease on it")
        else:
            super().__init__(f"job {job_id}: the controller lease (token {token}) no longer holds")


class JobFinished(SpothopError):
    """The job is in a final state (succeeded, failed, cancelled): nothing to cancel."""
