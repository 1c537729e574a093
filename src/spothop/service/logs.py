"""A job's worker output, across every recovery: ``spothop logs`` and ``GET /v1/jobs/{id}/logs``.

The output is what the agents shipped to the control plane (``job_log_chunks``,
:mod:`spothop.state.worker_logs`): the store is the one truth, on every cloud.
:func:`job_logs` reads each attempt's output once (its last bytes, when asked);
:class:`LogTail` follows them, handing out what each attempt's output gained since the
last call (``logs --follow`` on the embedded store). Bytes are decoded as UTF-8 where
they are joined, so a character split between two chunks (or two reads) comes out
whole; invalid bytes read as U+FFFD.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import asdict, dataclass
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
    from spothop.state.worker_logs import read_after, read_tail

    store.get_job(job_id)
    attempts = store.attempts(job_id)  # before the connection below: one at a time on SQLite
    entries = []
    with store.engine.connect() as conn:
        for a in attempts:
            if node is not None and a.node != node:
                continue
            if tail_bytes is None:
                _, raw = read_after(conn, job_id, a.attempt_id)
            else:
                _, raw = read_tail(conn, job_id, a.attempt_id, tail_bytes)
                raw = _from_a_character(raw) if tail_bytes else b""
            entries.append(AttemptLog.of(a, raw.decode("utf-8", errors="replace")))
    return JobLogs(tuple(entries))


def _from_a_character(raw: bytes) -> bytes:
    """``raw`` less the continuation bytes (at most 3) a cut inside a UTF-8 character left first."""
    skip = 0
    while skip < min(3, len(raw)) and 0x80 <= raw[skip] < 0xC0:
        skip += 1
    return raw[skip:]


class LogTail:
    """Follows a job's logs in the store: each :meth:`read` yields every attempt that has
    shipped output, with what its output gained since the last read (``log``; "" when nothing).

    ``tail_bytes``: an attempt's first read starts that many bytes before its stored end
    (None: from its start). :class:`~spothop.jobs.errors.JobNotFound` (exit 3), when made,
    for a job that does not exist.
    """

    def __init__(
        self,
        store: JobStore,
        job_id: str,
        node: int | None = None,
        tail_bytes: int | None = None,
    ) -> None:
        store.get_job(job_id)
        self.tail_bytes = tail_bytes
        self.store = store
        self.job_id = job_id
        self.node = node
        self._offsets: dict[str, int] = {}  # attempt → the byte read up to
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}  # a split character waits

    def read(self) -> Iterator[AttemptLog]:
        yield from self._read()  # read whole first: no connection is held while the caller prints

    def _read(self) -> list[AttemptLog]:
        from spothop.state.worker_logs import attempts_with_output, read_after, stored_end

        entries = []
        attempts = self.store.attempts(self.job_id)  # before the connection: one at a time
        with self.store.engine.connect() as conn:
            shipped = attempts_with_output(conn, self.job_id)
            for a in attempts:
                if a.attempt_id not in shipped or (self.node is not None and a.node != self.node):
                    continue
                offset = self._offsets.get(a.attempt_id)
                first = offset is None
                if offset is None:
                    end = stored_end(conn, self.job_id, a.attempt_id)
                    offset = 0 if self.tail_bytes is None else max(0, end - self.tail_bytes)
                _, raw = read_after(conn, self.job_id, a.attempt_id, offset)
                self._offsets[a.attempt_id] = offset + len(raw)
                if first and offset:
                    raw = _from_a_character(raw)  # a tail cut inside a character
                decoder = self._decoders.setdefault(
                    a.attempt_id, codecs.getincrementaldecoder("utf-8")(errors="replace")
                )
                entries.append(AttemptLog.of(a, decoder.decode(raw)))
        return entries
