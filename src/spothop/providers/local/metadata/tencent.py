"""Tencent Cloud CVM instance metadata for a local instance.

Documented behaviour followed here:

- https://www.tencentcloud.com/document/product/213/32487
  ``metadata.tencentyun.com/latest/meta-data/spot/termination-time`` returns
  the reclaim time of a spot instance, e.g. ``2018-08-18 12:05:33``, as the
  instance's OS time in UTC+8; "If the error code 404 is returned, the
  instance is not a spot instance or it's not terminated."
- https://www.tencentcloud.com/document/product/213/4934 (instance metadata)
  Items ``instance-id``, ``placement/zone``, ``placement/region``,
  ``instance/instance-type``, ``local-ipv4`` (the private address); plain ``GET``, no token; a directory lists its
  keys one a line.

Local choices: only ``GET``/``HEAD`` are served (others are 405).
"""

from __future__ import annotations

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata._http import (
    MetadataHandler,
    Request,
    Response,
    china_standard,
    serve_leaves,
)
from spothop.providers.local.metadata.codes import LOWER_ALNUM, ErrorCodes, InstanceIdShape
from spothop.providers.local.metadata.state import NoticeSnapshot

ROOT = "/latest"


# CVM spot instances are pay-as-you-go: billed by the second, settled hourly, no minimum:
# https://www.tencentcloud.com/document/product/213/17816 (Spot Instances overview).
BILLING = BillingRule(
    increment_s=1, source="https://www.tencentcloud.com/document/product/213/17816"
)


# CVM API error codes (tencentcloud.com/document/product/213/33281) and its
# instance ids ("ins-" and 8 lower-case letters or digits).
ERROR_CODES = ErrorCodes(
    capacity_unavailable="ResourceInsufficient.SpecifiedInstanceType",
    instance_not_found="InvalidInstanceId.NotFound",
    invalid_parameter="InvalidParameterValue",
    internal_error="InternalError",
)
INSTANCE_IDS = InstanceIdShape(prefix="ins-", alphabet=LOWER_ALNUM, length=8)


class TencentMetadataHandler(MetadataHandler):
    """``metadata.tencentyun.com/latest/meta-data``."""

    ERROR_CODES = ERROR_CODES
    BILLING = BILLING
    INSTANCE_IDS = INSTANCE_IDS

    def route(self, request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response.text("Method Not Allowed\n", 405)
        return serve_leaves(self._leaves(self.notices.snapshot()), ROOT, request.path)

    def _leaves(self, notices: NoticeSnapshot) -> dict[str, str]:
        md = self.metadata
        leaves = {
            "meta-data/instance-id": md.instance_id,
            "meta-data/instance/instance-type": md.instance_type,
            "meta-data/placement/zone": md.zone,
            "meta-data/placement/region": md.region,
            "meta-data/local-ipv4": md.private_address,
        }
        if md.spot and notices.termination_time is not None:
            leaves["meta-data/spot/termination-time"] = china_standard(notices.termination_time)
        return leaves
