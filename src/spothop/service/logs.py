"""A job's worker output, across every recovery: ``spothop logs`` and ``GET /v1/jobs/{id}/logs``.

:func:`job_logs` reads each attempt's log once (its tail, when asked); :class:`LogTail`
follows them, handing out what each log gained since the last call (``logs --follow`` on
the embedded store).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.jobs.records import AttemptRecord
    from spothop.jobs.store import JobStore


@dataclass(frozen=True)
class AttemptLog:
    """One attempt's worker output and where it ran; ``log`` is the text read (all of it, its
    tail, or what it gained since the last read: the call says)."""

    attempt_id: str
    node: int
    instance_id: str | None
    provider: str
    zone: str
    instance_type: str
    market: str
    log: str

    @classmethod
    def of(cls, a: AttemptRecord, log: str) -> AttemptLog:
        return cls(
            attempt_id=a.attempt_id,
            node=a.node,
            instance_id=a.instance_id,
            provider=a.provider,
            zone=a.zone,
            instance_type=a.instance_type,
            market=str(a.market_kind),
            log=log,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobLogs:
    """Each attempt's output, oldest attempt first: ``to_dict()`` is ``GET /v1/jobs/{id}/logs``'
    ``{"logs": …}``, :meth:`to_list` what ``logs --json`` prints."""

    logs: tuple[AttemptLog, ...]

    def to_list(self) -> list[dict[str, Any]]:
        return [entry.to_dict() for entry in self.logs]

    def to_dict(self) -> dict[str, Any]:
        return {"logs": self.to_list()}


def job_logs(
    store: JobStore, job_id: str, node: int | None = None, tail_bytes: int | None = None
) -> JobLogs:
    """Each attempt's worker output (of ``node`` when given), oldest attempt first: the last
    ``tail_bytes`` of it, when given. :class:`~spothop.jobs.errors.JobNotFound` (exit 3) for a
    job that does not exist."""
    from spothop.jobs.launcher import attempt_log_path

    store.get_job(job_id)
    return JobLogs(
        tuple(
            AttemptLog.of(a, read_log(attempt_log_path(job_id, a.node, a.attempt_id), tail_bytes))
            for a in store.attempts(job_id)
            if node is None or a.node == node
        )
    )


def read_log(path: Path, tail_bytes: int | None = None) -> str:
    """A log file's text ("" when there is none yet); only its last ``tail_bytes`` when given."""
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                handle.seek(0, 2)
                handle.seek(max(0, handle.tell() - tail_bytes))
            return handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


class LogTail:
    """Follows a job's logs in the embedded store: each :meth:`read` yields every attempt whose
    log exists, with what its log gained since the last read (``log``; "" when nothing).

    :class:`~spothop.jobs.errors.JobNotFound` (exit 3), when made, for a job that does not exist.
    """

    def __init__(self, store: JobStore, job_id: str, node: int | None = None) -> None:
        store.get_job(job_id)
        self.store = store
        self.job_id = job_id
        self.node = node
        self._offsets: dict[str, int] = {}

    def read(self) -> Iterator[AttemptLog]:
        from spothop.jobs.launcher import attempt_log_path

        for a in self.store.attempts(self.job_id):
            if self.node is not None and a.node != self.node:
                continue
            path = attempt_log_path(self.job_id, a.node, a.attempt_id)
            if not path.exists():
                continue
            offset = self._offsets.get(a.attempt_id, 0)
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            self._offsets[a.attempt_id] = offset + len(chunk)
            yield AttemptLog.of(a, chunk.decode("utf-8", errors="replace"))
