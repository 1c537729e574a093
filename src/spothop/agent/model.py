"""The agent's data: notices, the instance's identity, exit codes and the names shared with workers.

Times are unix seconds (``time.time()`` on this machine); durations carry
``_s``. Everything here is a frozen dataclass or a constant, so it can be
logged, compared and serialised as is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

# The exit codes are the agent ↔ controller contract, declared once in spothop.wire.contract.
from spothop.wire.contract import EXIT_DONE as EXIT_DONE
from spothop.wire.contract import EXIT_PREEMPTED as EXIT_PREEMPTED
from spothop.wire.contract import EXIT_USAGE as EXIT_USAGE
from spothop.wire.contract import EXIT_WORKER_FAILED as EXIT_WORKER_FAILED

# -- environment the cloud (or the local cloud's host) gives the agent -----------
# (what the agent gives the worker is named in spothop.worker.channel)
METADATA_URL_ENV = "SPOTHOP_METADATA_URL"  # same names as spothop.providers.local.metadata
METADATA_PROTOCOL_ENV = "SPOTHOP_METADATA_PROTOCOL"
CLOUD_ENV = "SPOTHOP_CLOUD"  # the provider's name (``aws``, ``aws-sim``); default: the protocol

# (the protocol of a notice that is the control plane's own stop request is
# spothop.wire.contract.CONTROL_PLANE_PROTOCOL: the controller reads it too)


class NoticeKind(StrEnum):
    ADVANCE = "advance"  # the instance may be taken soon: checkpoint durably now
    FINAL = "final"  # the instance will be taken at ``deadline``: run the emergency protocol


@dataclass(frozen=True)
class Notice:
    """One interruption notice as the agent understood it.

    ``notice_time`` is when the cloud issued it (its own stamp where it gives
    one, else when the agent saw it). ``deadline`` is when the instance will be
    taken (None for an advance notice without one). ``lead_time_s`` is
    ``deadline − seen_at`` clamped to ``[0, the cloud's documented lead]``: a
    deadline in the past means "now", and a lead longer than the cloud ever
    gives is clock skew, so the documented lead is used. ``cause`` names what
    was read (``instance-action``, ``preempted``, ``Preempt``, ``sigterm``,
    ``endpoint-lost``…); ``raw`` is the body as received.
    """

    kind: NoticeKind
    protocol: str
    cause: str
    notice_time: float
    deadline: float | None
    lead_time_s: float | None
    raw: str = ""
    event_id: str | None = None  # the cloud's id for the event, where it has one (Azure)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def final_notice(
    protocol: str,
    cause: str,
    *,
    seen_at: float,
    deadline: float | None,
    documented_lead_s: float | None,
    raw: str = "",
    notice_time: float | None = None,
    event_id: str | None = None,
) -> Notice:
    """A final notice with its lead time computed by the rules of :class:`Notice`.

    ``deadline`` None (the time could not be read) or before ``seen_at`` (the
    time has passed) is the worst case: the deadline is ``seen_at``, the lead 0.
    """
    if deadline is None or deadline < seen_at:
        deadline = seen_at  # unreadable or already past: the instance may be taken now
    lead = deadline - seen_at
    if documented_lead_s is not None and lead > documented_lead_s:
        lead = documented_lead_s
        deadline = seen_at + lead
    return Notice(
        NoticeKind.FINAL,
        protocol,
        cause,
        notice_time if notice_time is not None else seen_at,
        deadline,
        lead,
        raw,
        event_id,
    )


def advance_notice(
    protocol: str,
    cause: str,
    *,
    seen_at: float,
    raw: str = "",
    notice_time: float | None = None,
    deadline: float | None = None,
    event_id: str | None = None,
) -> Notice:
    """An advance notice; the worker is asked to checkpoint.

    Most have no deadline and no lead time. One that says when the event will
    start (AWS scheduled maintenance's ``NotBefore``) keeps it as ``deadline``,
    with ``lead_time_s`` from ``seen_at``; a time already past is ``seen_at``.
    """
    lead: float | None = None
    if deadline is not None:
        deadline = max(deadline, seen_at)
        lead = deadline - seen_at
    return Notice(
        NoticeKind.ADVANCE,
        protocol,
        cause,
        notice_time if notice_time is not None else seen_at,
        deadline,
        lead,
        raw,
        event_id,
    )


@dataclass(frozen=True)
class Identity:
    """Where the agent runs, as the metadata endpoint spells it (empty where it does not say)."""

    instance_id: str = ""
    instance_type: str = ""
    region: str = ""
    zone: str = ""
    # Degraded modes the endpoint is read in that still see every notice, one sentence each
    # (e.g. AWS IMDSv1 after the token PUT was refused); empty when it is read as designed.
    fallbacks: tuple[str, ...] = ()
    # The instance's address on its cloud's private network (empty: the endpoint does not say);
    # a grouped task's nodes meet at node 0's (docs/multinode.md).
    private_address: str = ""


@dataclass(frozen=True)
class SelfCheck:
    """The start-up check. ``notice_blind`` is true when a notice might be missed; ``reasons`` say why.

    The scheduler keeps spot work off a notice-blind instance type until the
    cause is fixed (it reads this from the agent's status file or events).
    """

    notice_blind: bool
    reasons: tuple[str, ...] = ()
    identity: Identity = field(default_factory=Identity)
