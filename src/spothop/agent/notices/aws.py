"""AWS EC2 spot notices through IMDSv2.

Documented behaviour relied on:

- IMDSv2 (docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html):
  ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``
  (1–21600) returns a session token; each ``GET`` carries it in
  ``X-aws-ec2-metadata-token``; an expired or unknown token gets ``401``.
  The token is refreshed :data:`AWS_TOKEN_REFRESH_S` before it expires, and
  at once on a ``401`` (the request is then retried once).
- Spot interruption notices (…/spot-instance-termination-notices.html):
  ``/latest/meta-data/spot/instance-action`` is 404 until the instance is
  marked, then ``{"action": "terminate|stop|hibernate", "time": "…Z"}``,
  two minutes ahead; ``spot/termination-time`` holds the same time.
- Rebalance recommendations (…/rebalance-recommendations.html):
  ``/latest/meta-data/events/recommendations/rebalance`` is 404 until one,
  then ``{"noticeTime": "…Z"}`` — the advance notice.

A 200 on instance-action whose body does not parse is still a final notice
(detected by status); its time is taken from ``termination-time`` if that
parses, else it is "now".
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.model import Identity, Notice, advance_notice, final_notice
from spothop.agent.notices._http import Reply, fetch
from spothop.agent.notices._time import parse_iso_utc
from spothop.agent.notices.base import Watcher

AWS_SPOT_NOTICE_S = 120.0  # EC2 docs: the interruption notice comes two minutes before the action
AWS_TOKEN_TTL_S = 21600  # IMDSv2 docs: the longest token TTL, six hours
AWS_TOKEN_REFRESH_S = 60.0  # refresh this long before expiry (or at a quarter of a short TTL)
TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TERMINATION_PATH = "/latest/meta-data/spot/termination-time"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
IDENTITY_PATHS = {
    "instance_id": "/latest/meta-data/instance-id",
    "instance_type": "/latest/meta-data/instance-type",
    "zone": "/latest/meta-data/placement/availability-zone",
    "region": "/latest/meta-data/placement/region",
}


class AwsWatcher(Watcher):
    """IMDSv2 with tokens required (also works where tokens are optional)."""

    protocol: ClassVar[str] = "aws"
    documented_lead_s: ClassVar[float | None] = AWS_SPOT_NOTICE_S

    def __init__(self, base_url: str | None, *, token_ttl_s: int = AWS_TOKEN_TTL_S, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self.token_ttl_s = token_ttl_s
        self._token: str | None = None
        self._token_expires = 0.0

    # -- the session token ---------------------------------------------------

    def _refresh_token(self) -> str:
        if not self.base_url:
            raise NoticeEndpointError("no metadata URL for protocol aws")
        reply = fetch("PUT", self.base_url + TOKEN_PATH, self.timeout_s, {TTL_HEADER: str(self.token_ttl_s)})
        if reply.status != 200 or not reply.body.strip():
            raise NoticeEndpointError(f"PUT {TOKEN_PATH}: HTTP {reply.status}: {reply.body[:200]!r}")
        self._token = reply.body.strip()
        self._token_expires = self.clock() + self.token_ttl_s
        return self._token

    def _valid_token(self) -> str:
        margin = min(AWS_TOKEN_REFRESH_S, self.token_ttl_s / 4)
        if self._token is None or self.clock() >= self._token_expires - margin:
            return self._refresh_token()
        return self._token

    def _imds(self, path: str) -> Reply:
        reply = self._get(path, {TOKEN_HEADER: self._valid_token()})
        if reply.status == 401:  # expired or revoked early: a new token, once
            reply = self._get(path, {TOKEN_HEADER: self._refresh_token()})
        if reply.status not in (200, 404):
            raise NoticeEndpointError(f"GET {path}: unexpected HTTP {reply.status}")
        return reply

    # -- notices -------------------------------------------------------------

    def poll(self) -> list[Notice]:
        action = self._imds(ACTION_PATH)
        seen = self.clock()
        if action.status == 200:
            return [self._final(action.body, seen)]
        rebalance = self._imds(REBALANCE_PATH)
        if rebalance.status == 200:
            stamp = _json_field(rebalance.body, "noticeTime")
            when = parse_iso_utc(stamp) if stamp else None
            return [advance_notice(self.protocol, "rebalance-recommendation", seen_at=seen,
                                   raw=rebalance.body, notice_time=when)]
        return []

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
        return final_notice(self.protocol, f"instance-action:{action}", seen_at=seen, deadline=deadline,
                            documented_lead_s=self.documented_lead_s, raw=body)

    def self_check(self) -> Identity:
        values = {}
        for name, path in IDENTITY_PATHS.items():
            reply = self._imds(path)
            if reply.status != 200:
                raise NoticeEndpointError(f"IMDSv2 has no {path} (HTTP {reply.status})")
            values[name] = reply.body.strip()
        return Identity(**values)


def _json_field(body: str, key: str) -> str | None:
    try:
        payload: Any = json.loads(body)
    except ValueError:
        return None
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None
