"""AWS EC2 spot notices through the instance metadata service (IMDSv2, else IMDSv1).

Documented behaviour relied on:

- IMDSv2 (docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html):
  ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``
  (1–21600) returns a session token; each ``GET`` carries it in
  ``X-aws-ec2-metadata-token``; an expired or unknown token gets ``401``.
  The token is refreshed :data:`AWS_TOKEN_REFRESH_S` before it expires, and
  at once on a ``401`` (the request is then retried once).
- IMDSv1 fallback, as AWS's own SDKs do it (botocore's ``IMDSFetcher``): a
  token ``PUT`` refused with a 4xx (403, 404, 405…) or never answered (the
  answer dropped by ``HttpPutResponseHopLimit`` 1 on its way into a
  container) means plain GETs without a token. The fallback is logged once,
  kept in :attr:`AwsWatcher.imdsv1_reason` and reported in the self-check's
  identity (``fallbacks``); the watcher sees every notice either way. A
  ``401`` on a plain GET (tokens became required) tries a token again.
- Spot interruption notices (…/spot-instance-termination-notices.html):
  ``/latest/meta-data/spot/instance-action`` is 404 until the instance is
  marked, then ``{"action": "terminate|stop|hibernate", "time": "…Z"}``,
  two minutes ahead; ``spot/termination-time`` holds the same time.
- Rebalance recommendations (…/rebalance-recommendations.html):
  ``/latest/meta-data/events/recommendations/rebalance`` is 404 until one,
  then ``{"noticeTime": "…Z"}`` — an advance notice.
- Scheduled events (…/monitoring-instances-status-check_sched.html,
  …/instancedata-data-categories.html):
  ``/latest/meta-data/events/maintenance/scheduled`` is a JSON list of
  ``{"Code", "Description", "EventId", "NotBefore", "NotAfter", "State"}``
  with times like ``21 Jan 2019 09:00:43 GMT``; codes ``instance-stop``,
  ``instance-retirement``, ``instance-reboot``, ``system-reboot``,
  ``system-maintenance``. Each ``active`` event is an advance notice whose
  deadline is its ``NotBefore`` (a durable checkpoint before a stop or a
  retirement days ahead); ``completed`` and ``canceled`` ones are history.
  An empty list or a 404 is no event. A document that does not parse is
  logged and skipped: the spot notice paths answered, so the instance is not
  notice-blind, and a bad maintenance list must not read as a lost endpoint.

A 200 on instance-action whose body does not parse is still a final notice
(detected by status); its time is taken from ``termination-time`` if that
parses, else it is "now".
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Identity, Notice, advance_notice, final_notice
from spothop.agent.notices._http import EndpointTimeout, Reply, fetch
from spothop.agent.notices._time import parse_iso_utc, parse_rfc1123
from spothop.agent.notices.base import Watcher, address_or_empty

log = logging.getLogger(__name__)

AWS_SPOT_NOTICE_S = 120.0  # EC2 docs: the interruption notice comes two minutes before the action
AWS_TOKEN_TTL_S = 21600  # IMDSv2 docs: the longest token TTL, six hours
AWS_TOKEN_REFRESH_S = 60.0  # refresh this long before expiry (or at a quarter of a short TTL)
# EC2 docs ("Instance metadata limits"): IMDS takes 1,024 packets per second per network interface.
# A poll is at most three GETs (about 1 ms each on the link-local endpoint), so 0.2 s is 15 a second:
# 1.5 % of the limit, and notice → worker SIGTERM stays under 250 ms.
AWS_POLL_INTERVAL_S = 0.2
TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TERMINATION_PATH = "/latest/meta-data/spot/termination-time"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
MAINTENANCE_PATH = "/latest/meta-data/events/maintenance/scheduled"
MAINTENANCE_PAST_STATES = frozenset(
    {"completed", "canceled"}
)  # EC2 docs: history, not a coming event
ADDRESS_PATH = "/latest/meta-data/local-ipv4"  # EC2 docs, instance metadata categories
IDENTITY_PATHS = {
    "instance_id": "/latest/meta-data/instance-id",
    "instance_type": "/latest/meta-data/instance-type",
    "zone": "/latest/meta-data/placement/availability-zone",
    "region": "/latest/meta-data/placement/region",
}


class AwsWatcher(Watcher):
    """IMDSv2 (tokens required or optional); IMDSv1 where the token PUT is refused or never answered."""

    protocol: ClassVar[str] = "aws"
    documented_lead_s: ClassVar[float | None] = AWS_SPOT_NOTICE_S
    default_poll_interval_s: ClassVar[float] = AWS_POLL_INTERVAL_S

    def __init__(
        self, base_url: str | None, *, token_ttl_s: int = AWS_TOKEN_TTL_S, **kwargs: Any
    ) -> None:
        super().__init__(base_url, **kwargs)
        self.token_ttl_s = token_ttl_s
        self.imdsv1_reason: str | None = (
            None  # why the watcher reads IMDSv1 (no token); None: IMDSv2
        )
        self._token: str | None = None
        self._token_expires = 0.0
        self._fallback_logged = False
        self._bad_maintenance_logged = False

    @property
    def fallbacks(self) -> tuple[str, ...]:
        return (
            (f"IMDSv1 without a session token: {self.imdsv1_reason}",) if self.imdsv1_reason else ()
        )

    # -- the session token ---------------------------------------------------

    def _refresh_token(self) -> str | None:
        """A new token; None (and IMDSv1 from now on) when the PUT is refused or never answered."""
        if not self.base_url:
            raise NoticeEndpointError("no metadata URL for protocol aws")
        try:
            reply = fetch(
                "PUT",
                self.base_url + TOKEN_PATH,
                self.timeout_s,
                {TTL_HEADER: str(self.token_ttl_s)},
            )
        except EndpointTimeout:
            self._fall_back(
                f"the token PUT got no answer within {self.timeout_s:g} s "
                "(a container behind a PUT response hop limit of 1?)"
            )
            return None
        if reply.status == 200 and reply.body.strip():
            self._token, self.imdsv1_reason = reply.body.strip(), None
            self._token_expires = self.clock() + self.token_ttl_s
            return self._token
        if 400 <= reply.status < 500:
            self._fall_back(f"the token PUT was refused (HTTP {reply.status})")
            return None
        raise NoticeEndpointError(f"PUT {TOKEN_PATH}: HTTP {reply.status}: {reply.body[:200]!r}")

    def _fall_back(self, reason: str) -> None:
        self._token, self.imdsv1_reason = None, reason
        if not self._fallback_logged:  # once: a poll every 0.2 s must not flood the log
            self._fallback_logged = True
            log.warning("IMDSv2 unavailable, reading IMDSv1: %s", reason)

    def _token_headers(self) -> dict[str, str]:
        if self.imdsv1_reason is not None:
            return {}
        margin = min(AWS_TOKEN_REFRESH_S, self.token_ttl_s / 4)
        token = self._token
        if token is None or self.clock() >= self._token_expires - margin:
            token = self._refresh_token()
        return {TOKEN_HEADER: token} if token else {}

    def _imds(self, path: str) -> Reply:
        reply = self._get(path, self._token_headers())
        if (
            reply.status == 401
        ):  # a token expired or revoked early, or IMDSv1 turned off: a new token, once
            token = self._refresh_token()
            reply = self._get(path, {TOKEN_HEADER: token} if token else {})
        if reply.status not in (200, 404):
            raise NoticeEndpointError(f"GET {path}: unexpected HTTP {reply.status}")
        return reply

    # -- notices -------------------------------------------------------------

    def poll(self) -> list[Notice]:
        action = self._imds(ACTION_PATH)
        seen = self.clock()
        if action.status == 200:
            return [self._final(action.body, seen)]
        notices: list[Notice] = []
        rebalance = self._imds(REBALANCE_PATH)
        if rebalance.status == 200:
            stamp = _json_field(rebalance.body, "noticeTime")
            when = parse_iso_utc(stamp) if stamp else None
            notices.append(
                advance_notice(
                    self.protocol,
                    "rebalance-recommendation",
                    seen_at=seen,
                    raw=rebalance.body,
                    notice_time=when,
                )
            )
        maintenance = self._imds(MAINTENANCE_PATH)
        if maintenance.status == 200:
            notices += self._scheduled(maintenance.body, seen)
        return notices

    def _scheduled(self, body: str, seen: float) -> list[Notice]:
        """The active scheduled events in ``body`` as advance notices with their NotBefore."""
        try:
            events: Any = json.loads(body)
        except ValueError:
            events = None
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            if not self._bad_maintenance_logged:
                self._bad_maintenance_logged = True
                log.warning(
                    "%s is not a JSON list of events, skipped: %r", MAINTENANCE_PATH, body[:200]
                )
            return []
        notices = []
        for event in events:
            state = str(event.get("State", "active")).lower()
            if state in MAINTENANCE_PAST_STATES:
                continue
            code = str(event.get("Code") or "unknown")
            not_before = event.get("NotBefore")
            start = parse_rfc1123(not_before) if isinstance(not_before, str) else None
            event_id = event.get("EventId")
            notices.append(
                advance_notice(
                    self.protocol,
                    f"scheduled-event:{code}",
                    seen_at=seen,
                    raw=json.dumps(event),
                    deadline=start if start is not None else seen,
                    event_id=event_id if isinstance(event_id, str) else None,
                )
            )
        return notices

    def _final(self, body: str, seen: float) -> Notice:
        action = _json_field(body, "action") or "unknown"
        stamp = _json_field(body, "time")
        deadline = parse_iso_utc(stamp) if stamp else None
        if deadline is None:  # the notice is real (status 200); try the other path for its time
            try:
                fallback = self._imds(TERMINATION_PATH)
                deadline = parse_iso_utc(fallback.body) if fallback.status == 200 else None
            except NoticeEndpointError:
                deadline = None
        return final_notice(
            self.protocol,
            f"instance-action:{action}",
            seen_at=seen,
            deadline=deadline,
            documented_lead_s=self.documented_lead_s,
            raw=body,
        )

    def self_check(self) -> Identity:
        values: dict[str, str] = {}
        for name, path in IDENTITY_PATHS.items():
            reply = self._imds(path)
            if reply.status != 200:
                raise NoticeEndpointError(f"IMDS has no {path} (HTTP {reply.status})")
            values[name] = reply.body.strip()
        return Identity(
            values["instance_id"],
            values["instance_type"],
            values["region"],
            values["zone"],
            fallbacks=self.fallbacks,
            private_address=self.private_address(),
        )

    def private_address(self) -> str:
        try:
            reply = self._imds(ADDRESS_PATH)
        except NoticeEndpointError:
            return ""
        return address_or_empty(reply.body) if reply.status == 200 else ""


def _json_field(body: str, key: str) -> str | None:
    try:
        payload: Any = json.loads(body)
    except ValueError:
        return None
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None
