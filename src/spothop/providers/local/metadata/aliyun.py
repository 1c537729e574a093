"""Alibaba Cloud ECS instance metadata (normal and security-hardened mode) for a local instance.

Documented behaviour followed here:

- https://www.alibabacloud.com/help/en/ecs/user-guide/query-the-interruption-events-of-preemptible-instances
  ``/latest/meta-data/instance/spot/termination-time`` returns 404 while the
  preemptible instance may keep running; once it is to be reclaimed (about
  5 minutes ahead) it returns the release time in UTC, ISO 8601
  (``2026-01-01T00:02:00Z``).
- https://www.alibabacloud.com/help/en/ecs/user-guide/view-instance-metadata
  Security-hardened mode: ``PUT /latest/api/token`` with
  ``X-aliyun-ecs-metadata-token-ttl-seconds`` (1 to 21600) returns a token;
  ``GET`` requests then carry it in ``X-aliyun-ecs-metadata-token``. A token
  ``PUT`` carrying ``X-Forwarded-For`` is refused. Items ``instance-id``,
  ``instance/instance-type``, ``zone-id``, ``region-id``, ``private-ipv4`` (the
  instance's private address; instance metadata items).
- https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-modifyinstancemetadataoptions
  ``HttpTokens`` is ``optional`` by default (both modes work) or
  ``required`` (normal mode refused). The option ``require_token`` here is
  ``HttpTokens=required``.

Local choices: when a token header is sent it must be valid (401 otherwise),
even in optional mode; a missing token in required mode is a 401 as well;
a bad TTL is a 400, as IMDSv2 answers; tokens are random per server with TTL
on the notice state's clock.
"""

from __future__ import annotations

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata._http import (
    MetadataHandler,
    Request,
    Response,
    iso_utc,
    issue_token,
    serve_leaves,
)
from spothop.providers.local.metadata.codes import LOWER_ALNUM, ErrorCodes, IdQuery, InstanceIdShape
from spothop.providers.local.metadata.state import NoticeSnapshot

ALIYUN_TOKEN_TTL_MIN_S = 1  # ECS metadata docs: 1 to 21600 seconds
ALIYUN_TOKEN_TTL_MAX_S = 21600  # ECS metadata docs: at most 6 hours
ALIYUN_TOKEN_PATH = "/latest/api/token"
ALIYUN_TOKEN_TTL_HEADER = "X-aliyun-ecs-metadata-token-ttl-seconds"
ALIYUN_TOKEN_HEADER = "X-aliyun-ecs-metadata-token"
ROOT = "/latest"


# ECS preemptible (spot) instances are billed by the second; during the protection period
# (1 hour by default) at the market price when bought, then at the real-time price:
# https://www.alibabacloud.com/help/doc-detail/60400.htm (DescribeSpotPriceHistory, SpotDuration)
# and https://www.alibabacloud.com/help/doc-detail/161331.htm ("Billing rules").
BILLING = BillingRule(
    increment_s=1,
    price_fixed_s=3600,
    source="https://www.alibabacloud.com/help/doc-detail/161331.htm",
)


# ECS API error codes (RunInstances: no stock, a spot price limit under the
# public price) and its instance ids ("i-" and 20 lower-case letters or digits).
ERROR_CODES = ErrorCodes(
    capacity_unavailable="OperationDenied.NoStock",
    instance_not_found="InvalidInstanceId.NotFound",
    invalid_parameter="InvalidParameter",
    internal_error="InternalError",
    price_too_low="InvalidSpotPriceLimit.LowerThanPublicPrice",
)
INSTANCE_IDS = InstanceIdShape(prefix="i-", alphabet=LOWER_ALNUM, length=20)


class AliyunMetadataHandler(MetadataHandler):
    """``100.100.100.200/latest/meta-data``; option ``require_token`` (default False)."""

    ID_QUERY = IdQuery(
        token_path=ALIYUN_TOKEN_PATH,
        token_ttl_header=ALIYUN_TOKEN_TTL_HEADER,
        token_header=ALIYUN_TOKEN_HEADER,
    )

    ERROR_CODES = ERROR_CODES
    BILLING = BILLING
    INSTANCE_IDS = INSTANCE_IDS

    OPTIONS = frozenset({"require_token"})

    def route(self, request: Request) -> Response:
        if request.path.rstrip("/") == ALIYUN_TOKEN_PATH:
            if request.method != "PUT":
                return Response.text("Method Not Allowed\n", 405)
            return self._issue_token(request)
        if request.method not in ("GET", "HEAD"):
            return Response.text("Method Not Allowed\n", 405)
        token = request.header(ALIYUN_TOKEN_HEADER)
        if token is not None and not self.meta_server.tokens.valid(token):
            return Response.text("Unauthorized: invalid or expired token\n", 401)
        if token is None and bool(self.meta_server.options.get("require_token", False)):
            return Response.text("Unauthorized: a metadata token is required\n", 401)
        return serve_leaves(self._leaves(self.notices.snapshot()), ROOT, request.path)

    def _issue_token(self, request: Request) -> Response:
        return issue_token(
            request,
            self.meta_server.tokens,
            ALIYUN_TOKEN_TTL_HEADER,
            ALIYUN_TOKEN_TTL_MIN_S,
            ALIYUN_TOKEN_TTL_MAX_S,
            echo_ttl=False,
        )

    def _leaves(self, notices: NoticeSnapshot) -> dict[str, str]:
        md = self.metadata
        leaves = {
            "meta-data/instance-id": md.instance_id,
            "meta-data/instance/instance-type": md.instance_type,
            "meta-data/zone-id": md.zone,
            "meta-data/region-id": md.region,
            "meta-data/private-ipv4": md.private_address,
        }
        if md.spot and notices.termination_time is not None:
            leaves["meta-data/instance/spot/termination-time"] = iso_utc(notices.termination_time)
        return leaves
