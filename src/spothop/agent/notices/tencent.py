"""Tencent Cloud CVM spot notices.

Documented behaviour relied on (tencentcloud.com/document/product/213/32487):
``/latest/meta-data/spot/termination-time`` returns the reclaim time, e.g.
``2018-08-18 12:05:33``, in the instance's OS time, UTC+8, two minutes
ahead; 404 means no reclaim. Plain GETs, no token.
"""

from __future__ import annotations

from typing import ClassVar

from spothop.agent.notices._time import parse_china_standard
from spothop.agent.notices.base import PathWatcher

TENCENT_SPOT_NOTICE_S = 120.0  # Tencent docs: reclaim is announced about 2 minutes ahead
# CVM docs give no rate limit for the metadata service; one GET each 0.2 s (5 a second) is what
# AWS's far larger limit is asked for, and keeps notice → worker SIGTERM under 250 ms.
TENCENT_POLL_INTERVAL_S = 0.2


class TencentWatcher(PathWatcher):
    protocol: ClassVar[str] = "tencent"
    documented_lead_s: ClassVar[float | None] = TENCENT_SPOT_NOTICE_S
    default_poll_interval_s: ClassVar[float] = TENCENT_POLL_INTERVAL_S
    notice_path: ClassVar[str] = "/latest/meta-data/spot/termination-time"
    identity_paths: ClassVar[dict[str, str]] = {
        "instance_id": "/latest/meta-data/instance-id",
        "instance_type": "/latest/meta-data/instance/instance-type",
        "zone": "/latest/meta-data/placement/zone",
        "region": "/latest/meta-data/placement/region",
    }
    address_path: ClassVar[str | None] = "/latest/meta-data/local-ipv4"  # CVM docs, 213/4934

    @staticmethod
    def parse_time(text: str) -> float | None:
        return parse_china_standard(text)
