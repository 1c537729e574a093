"""What every notice watcher is: one poll of its cloud's endpoint, turned into :class:`Notice`\\ s.

Contracts every watcher keeps (``tests/agent`` checks them per protocol):

- :meth:`Watcher.poll` returns the notices visible now (usually none). It
  raises :class:`~spothop.wire.errors.NoticeEndpointError` for anything it
  cannot trust — unreachable, timed out, 5xx, a body that does not parse on a
  protocol that signals by value — and never any other exception on a bad
  answer. It may block up to about ``poll_interval_s`` (long-polls) but no
  longer than ``timeout_s`` plus that.
- A protocol that signals by *status* (a path that is 404 until a notice)
  treats a 200 as a notice even when its body does not parse: the notice is
  real, only its time is unknown, so the deadline is "now" (lead 0).
- A notice with no time of its own (GCP ``preempted``, SIGTERM) gets
  ``assumed_lead_s`` (default: the cloud's documented lead) from when it was seen.
- :meth:`Watcher.self_check` reads the instance's identity and raises
  NoticeEndpointError, with a reason, when the endpoint does not answer in its
  protocol.
  The identity's ``fallbacks`` (also :attr:`Watcher.fallbacks`) say, one
  sentence each, where the endpoint is read in a degraded mode that still
  sees every notice (AWS IMDSv1 when the token PUT is refused).
- The identity's ``private_address`` is read where the protocol documents one
  (:meth:`Watcher.private_address`); an endpoint that does not answer it leaves it
  empty (it is no notice's concern, so the self-check does not fail for it).
- :meth:`Watcher.acknowledge` tells the cloud the instance is ready to go
  (Azure's StartRequests); a no-op where the cloud has no such call; it never raises.
- ``default_poll_interval_s`` is the protocol's own poll interval, declared
  in its module with the cloud's rate limit it respects; ``poll_interval_s``
  None takes it.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Identity, Notice, final_notice
from spothop.agent.notices._http import Reply, fetch

MAX_ADDRESS_LEN = 64  # an address as the wire bounds it (spothop.wire.group.Address)
HTTP_TIMEOUT_S = 2.0  # a link-local endpoint answers in milliseconds; 2 s means it is not answering
POLL_INTERVAL_S = (
    1.0  # for a protocol that declares none: once a second, what Azure's guidance asks
)
Clock = Callable[[], float]


class Watcher(ABC):
    """One cloud's notice endpoint. Subclasses set the class attributes and implement two methods."""

    protocol: ClassVar[str]
    documented_lead_s: ClassVar[float | None] = (
        None  # the cloud's final-notice lead, for skew capping
    )
    long_poll: ClassVar[bool] = False  # poll() itself waits for a change: no sleep between polls
    default_poll_interval_s: ClassVar[float] = (
        POLL_INTERVAL_S  # each protocol declares its own, with its source
    )

    def __init__(
        self,
        base_url: str | None,
        *,
        poll_interval_s: float | None = None,
        timeout_s: float = HTTP_TIMEOUT_S,
        assumed_lead_s: float | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.base_url = (base_url or "").rstrip("/")
        self.poll_interval_s = (
            poll_interval_s if poll_interval_s is not None else self.default_poll_interval_s
        )
        self.timeout_s = timeout_s
        self.assumed_lead_s = (
            assumed_lead_s if assumed_lead_s is not None else self.documented_lead_s
        )
        self.clock = clock

    @abstractmethod
    def poll(self) -> list[Notice]:
        """The notices visible now; NoticeEndpointError when the endpoint cannot be trusted this time."""

    @abstractmethod
    def self_check(self) -> Identity:
        """Who this instance is, read from the endpoint; NoticeEndpointError with the reason if it does not answer."""

    @property
    def fallbacks(self) -> tuple[str, ...]:
        """Degraded modes the endpoint is read in, one sentence each (empty: read as designed)."""
        return ()

    def acknowledge(self, notice: Notice) -> None:
        """Tell the cloud the instance is ready to be taken. Default: the cloud has no such call."""
        del notice

    def private_address(self) -> str:
        """The instance's private address as the endpoint gives it; "" when it does not (default:
        the protocol documents none). Never raises."""
        return ""

    def _read_address(self, path: str, headers: dict[str, str] | None = None) -> str:
        """The address a plain GET of ``path`` answers, or "" for anything else (never raises)."""
        try:
            reply = self._get(path, headers)
        except NoticeEndpointError:
            return ""
        return address_or_empty(reply.body) if reply.status == 200 else ""

    # -- helpers for subclasses ----------------------------------------------

    def _get(
        self, path: str, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> Reply:
        if not self.base_url:
            raise NoticeEndpointError(f"no metadata URL for protocol {self.protocol}")
        reply = fetch("GET", self.base_url + path, timeout_s or self.timeout_s, headers)
        if reply.server_error:
            raise NoticeEndpointError(f"GET {path}: HTTP {reply.status}")
        return reply

    def _expect(self, reply: Reply, path: str, statuses: tuple[int, ...] = (200,)) -> Reply:
        if reply.status not in statuses:
            raise NoticeEndpointError(
                f"GET {path}: unexpected HTTP {reply.status}: {reply.body[:200]!r}"
            )
        return reply


def address_or_empty(text: str) -> str:
    """``text`` as one address (stripped), or "" when it cannot be one: empty, too long for the
    wire, or holding whitespace or control characters."""
    value = text.strip()
    if not value or len(value) > MAX_ADDRESS_LEN or not value.isprintable() or " " in value:
        return ""
    return value


class PathWatcher(Watcher):
    """A cloud whose notice is one path: 404 until the notice, then a time stamp.

    Alibaba, Tencent and Volcengine work like this; subclasses name the path,
    the time parser, and where the identity lives.
    """

    notice_path: ClassVar[str]
    identity_paths: ClassVar[dict[str, str]]  # Identity field → path
    address_path: ClassVar[str | None] = None  # the private address's path, where documented

    @staticmethod
    @abstractmethod
    def parse_time(text: str) -> float | None:
        """The notice body → unix seconds, or None if it cannot be read."""

    def headers(self) -> dict[str, str]:
        return {}

    def poll(self) -> list[Notice]:
        reply = self._get(self.notice_path, self.headers())
        seen = self.clock()
        if reply.status == 404:
            return []
        self._expect(reply, self.notice_path)
        deadline = self.parse_time(reply.body)
        return [
            final_notice(
                self.protocol,
                "termination-time",
                seen_at=seen,
                deadline=deadline,
                documented_lead_s=self.documented_lead_s,
                raw=reply.body,
            )
        ]

    def self_check(self) -> Identity:
        values: dict[str, str] = {}
        for name, path in self.identity_paths.items():
            reply = self._expect(self._get(path, self.headers()), path)
            values[name] = reply.body.strip()
        if not values.get("instance_id"):
            raise NoticeEndpointError(
                f"{self.protocol} metadata answered with an empty instance id"
            )
        return Identity(
            values["instance_id"],
            values.get("instance_type", ""),
            values.get("region", ""),
            values.get("zone", ""),
            fallbacks=self.fallbacks,
            private_address=self.private_address(),
        )

    def private_address(self) -> str:
        path = self.address_path
        return self._read_address(path, self.headers()) if path else ""
