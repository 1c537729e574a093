"""Volcengine (BytePlus) ECS spot notices.

Documented behaviour relied on (volcengine.com/docs/6396/155893; the instance's
private address: docs/6396/113780, below):
``/latest/spot_instance_termination_time`` is absent (404) until the
interruption event, then the release time in UTC, five minutes ahead. The
exact format is not documented; ISO 8601 UTC is read (as AWS and Alibaba
print it), and an unreadable time is the worst case, "now".
"""

from __future__ import annotations

from typing import ClassVar

from spothop.agent.errors import NoticeEndpointError
from spothop.agent.notices._time import parse_iso_utc
from spothop.agent.notices.base import PathWatcher, address_or_empty

VOLCENGINE_SPOT_NOTICE_S = 300.0  # Volcengine docs: the interruption event comes 5 minutes ahead
# ECS docs give no rate limit for the metadata service; one GET each 0.2 s (5 a second) is what
# AWS's far larger limit is asked for, and keeps notice → worker SIGTERM under 250 ms.
VOLCENGINE_POLL_INTERVAL_S = 0.2
MAC_PATH = "/latest/mac"
ADDRESS_PATH = "/latest/network/interfaces/macs/{mac}/primary_ip_address"


class VolcengineWatcher(PathWatcher):
    protocol: ClassVar[str] = "volcengine"
    documented_lead_s: ClassVar[float | None] = VOLCENGINE_SPOT_NOTICE_S
    default_poll_interval_s: ClassVar[float] = VOLCENGINE_POLL_INTERVAL_S
    notice_path: ClassVar[str] = "/latest/spot_instance_termination_time"
    identity_paths: ClassVar[dict[str, str]] = {
        "instance_id": "/latest/instance_id",
        "instance_type": "/latest/instance_type",
        "zone": "/latest/zone_id",
        "region": "/latest/region_id",
    }

    @staticmethod
    def parse_time(text: str) -> float | None:
        return parse_iso_utc(text)

    def private_address(self) -> str:
        """The primary private address of the instance's interface (docs/6396/113780: ``mac``,
        then ``network/interfaces/macs/[mac]/primary_ip_address``); "" when either is missing."""
        try:
            reply = self._get(MAC_PATH)
        except NoticeEndpointError:
            return ""
        mac = address_or_empty(reply.body) if reply.status == 200 else ""
        return self._read_address(ADDRESS_PATH.format(mac=mac)) if mac else ""
