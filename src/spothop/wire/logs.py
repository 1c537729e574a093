"""The worker's output on the wire: :class:`LogChunk`, one ordered piece of one attempt's output.

The agent tails the worker's output file (:func:`worker_log_path`, in its
``--state-dir``: instance-local) and ships what it gained, oldest first, with
:meth:`~spothop.wire.contract.ControlPlane.ship_log`. A chunk says where it
starts in the attempt's output (``offset_bytes``); the store keeps each
attempt's bytes in order (``docs/agent.md``, "Log shipping"):

- a chunk that starts at the stored end is appended;
- the part of a chunk the store already holds is skipped (a resend after a
  lost answer, or after a restart of the agent, stores nothing twice);
- a chunk that starts past the stored end would leave a hole: it is refused
  with :class:`~spothop.wire.errors.LogOffsetGap`, which carries the stored
  end (``end_bytes``) so the agent resends from there.

``data`` is the chunk's bytes in base64, not text. Offsets are byte offsets
of the file, and a chunk ends where the file ended when it was read, often
inside a UTF-8 character; bytes keep every offset exact (a tail of N bytes, a
follow from offset X, a resync) and decoding happens once, on the joined
bytes, where a character split between two chunks is whole again (invalid
UTF-8 is replaced only there). Base64 also has a fixed size (4/3), where
JSON-escaped text of control bytes (progress bars, colours) grows up to six
times: a chunk of :data:`CHUNK_MAX_BYTES` always fits a request body.

Standard library only: the agent imports it while it watches.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from spothop.wire.fields import Count, Id, Limits, OptionalId

CHUNK_MAX_BYTES = 256 * 1024  # one chunk's bytes at most (its base64: 4/3 of that)
WORKER_LOG_NAME = "worker.log"
ATTEMPT_ID_ENV = "SPOTHOP_ATTEMPT_ID"  # the attempt the agent runs (set by the launcher)
NODE_RANK_ENV = "SPOTHOP_NODE_RANK"  # the node of the attempt's group (0 for one node)
OFFSET_MAX_BYTES = 2**53  # far past any log; within a double and a BIGINT

ByteOffset = Annotated[int, Limits(ge=0, le=OFFSET_MAX_BYTES)]
Base64 = Annotated[str, Limits(min_len=4, max_len=(CHUNK_MAX_BYTES + 2) // 3 * 4)]


def worker_log_path(state_dir: Path) -> Path:
    """The worker's output file on the instance: ``<state-dir>/worker.log`` (the launcher's driver
    writes it; the agent ships it)."""
    return state_dir / WORKER_LOG_NAME


WORKER_PHASE_NAME = "worker.phase"
WORKER_PHASES = ("setup", "run")


def worker_phase_path(state_dir: Path) -> Path:
    """Where the launcher's driver writes the phase of the job's command it starts (``setup``,
    then ``run``): ``<state-dir>/worker.phase``, beside the worker's log; the agent reads it
    when the worker exits (:func:`read_worker_phase`)."""
    return state_dir / WORKER_PHASE_NAME


def read_worker_phase(state_dir: Path) -> str:
    """The phase the driver last wrote (``setup`` or ``run``), or "" when none is there."""
    try:
        text = worker_phase_path(state_dir).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    phase = text.strip()
    return phase if phase in WORKER_PHASES else ""


@dataclass(frozen=True)
class LogChunk:
    """``data`` (base64 of 1 to :data:`CHUNK_MAX_BYTES` bytes) of attempt ``attempt_id``'s output,
    from byte ``offset_bytes`` on; ``job_id`` and ``node`` say whose (the server takes the job
    from the agent's token)."""

    instance_id: Id
    attempt_id: Id
    offset_bytes: ByteOffset
    data: Base64
    job_id: OptionalId = ""
    node: Count = 0

    @classmethod
    def of(
        cls,
        raw: bytes,
        *,
        instance_id: str,
        attempt_id: str,
        offset_bytes: int,
        job_id: str = "",
        node: int = 0,
    ) -> LogChunk:
        """The chunk of ``raw`` (1 to :data:`CHUNK_MAX_BYTES` bytes; ValueError otherwise)."""
        if not 0 < len(raw) <= CHUNK_MAX_BYTES:
            raise ValueError(
                f"a log chunk holds 1 to {CHUNK_MAX_BYTES} bytes, not {len(raw)}; split it"
            )
        if offset_bytes < 0:
            raise ValueError(f"a log chunk's offset_bytes is >= 0, not {offset_bytes}")
        return cls(
            instance_id=instance_id,
            attempt_id=attempt_id,
            offset_bytes=offset_bytes,
            data=base64.b64encode(raw).decode("ascii"),
            job_id=job_id,
            node=node,
        )

    def raw(self) -> bytes:
        """The chunk's bytes; ValueError for ``data`` that is not base64 of 1 to
        :data:`CHUNK_MAX_BYTES` bytes."""
        try:
            raw = base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"a log chunk's data is not base64: {exc}") from None
        if not 0 < len(raw) <= CHUNK_MAX_BYTES:
            raise ValueError(f"a log chunk holds 1 to {CHUNK_MAX_BYTES} bytes, not {len(raw)}")
        return raw

    @property
    def end_bytes(self) -> int:
        """The offset just past the chunk's last byte."""
        return self.offset_bytes + len(self.raw())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogChunk:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
