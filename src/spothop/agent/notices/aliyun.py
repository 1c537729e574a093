"""Alibaba Cloud ECS preemptible-instance notices.

Documented behaviour relied on
(alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances):
``/latest/meta-data/instance/spot/termination-time`` is 404 while the
instance may keep running, then the release time in ISO 8601 UTC, about five
minutes ahead. In security-hardened mode (…/view-instance-metadata) a token
from ``PUT /latest/api/token`` (``X-aliyun-ecs-metadata-token-ttl-seconds``)
goes in ``X-aliyun-ecs-metadata-token``. This watcher asks for a token first
and falls back to normal mode only when the token call is not served; a
``401`` fetches a new token and retries once.
"""

from __future__ import annotations

from typing import ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.notices._http import Reply, fetch
from spothop.agent.notices._time import parse_iso_utc
from spothop.agent.notices.base import PathWatcher

ALIYUN_SPOT_NOTICE_S = 300.0  # ECS docs: the release notice comes about 5 minutes ahead
ALIYUN_TOKEN_TTL_S = 21600  # ECS docs: the longest token TTL, six hours
TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aliyun-ecs-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aliyun-ecs-metadata-token"
TOKEN_REFRESH_FRACTION = 0.75  # refresh after three quarters of the TTL
# ECS docs give no rate limit for the metadata service; one GET each 0.2 s (5 a second) is what
# AWS's far larger limit is asked for, and keeps notice → worker SIGTERM under 250 ms.
ALIYUN_POLL_INTERVAL_S = 0.2


class AliyunWatcher(PathWatcher):
    protocol: ClassVar[str] = "aliyun"
    documented_lead_s: ClassVar[float | None] = ALIYUN_SPOT_NOTICE_S
    default_poll_interval_s: ClassVar[float] = ALIYUN_POLL_INTERVAL_S
    notice_path: ClassVar[str] = "/latest/meta-data/instance/spot/termination-time"
    identity_paths: ClassVar[dict[str, str]] = {
        "instance_id": "/latest/meta-data/instance-id",
        "instance_type": "/latest/meta-data/instance/instance-type",
        "zone": "/latest/meta-data/zone-id",
        "region": "/latest/meta-data/region-id",
    }
    address_path: ClassVar[str | None] = "/latest/meta-data/private-ipv4"  # ECS metadata items
    _token: str | None = None
    _token_expires: float = 0.0
    _hardened: bool | None = None  # None: not tried yet
    _normal_mode_reason: str | None = None

    @staticmethod
    def parse_time(text: str) -> float | None:
        return parse_iso_utc(text)

    def headers(self) -> dict[str, str]:
        if self._hardened is False:
            return {}
        if self._token is None or self.clock() >= self._token_expires:
            self._fetch_token()
        return {TOKEN_HEADER: self._token} if self._token else {}

    def _fetch_token(self) -> None:
        if not self.base_url:
            raise NoticeEndpointError("no metadata URL for protocol aliyun")
        reply = fetch(
            "PUT", self.base_url + TOKEN_PATH, self.timeout_s, {TTL_HEADER: str(ALIYUN_TOKEN_TTL_S)}
        )
        if reply.status == 200 and reply.body.strip():
            self._hardened, self._token = True, reply.body.strip()
            self._token_expires = self.clock() + ALIYUN_TOKEN_TTL_S * TOKEN_REFRESH_FRACTION
        elif reply.status in (404, 405):
            self._hardened = False  # normal mode only
            self._normal_mode_reason = f"the token PUT answered HTTP {reply.status}"
        else:
            raise NoticeEndpointError(f"PUT {TOKEN_PATH}: HTTP {reply.status}")

    @property
    def fallbacks(self) -> tuple[str, ...]:
        reason = self._normal_mode_reason
        return (f"normal mode without a token: {reason}",) if reason else ()

    def _get(
        self, path: str, headers: dict[str, str] | None = None, timeout_s: float | None = None
    ) -> Reply:
        reply = super()._get(path, headers, timeout_s)
        if reply.status == 401 and self._hardened is not False:
            self._token = None
            reply = super()._get(path, self.headers(), timeout_s)
        return reply
