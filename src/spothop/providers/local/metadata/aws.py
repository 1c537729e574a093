"""AWS EC2 instance metadata (IMDSv2, tokens required) for a local instance.

Documented behaviour followed here:

- https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html
  IMDSv2 is session-based: ``PUT /latest/api/token`` with the header
  ``X-aws-ec2-metadata-token-ttl-seconds`` (1 to 21600 seconds) returns a
  token; every metadata ``GET`` carries it in ``X-aws-ec2-metadata-token``.
  With tokens *required* (what this endpoint emulates) a missing, expired or
  unknown token gets ``401 Unauthorized``; a bad TTL gets ``400``; a token
  ``PUT`` carrying ``X-Forwarded-For`` is refused (``403``), so a proxy on the
  instance cannot fetch tokens for someone else. The token response echoes the
  TTL in ``X-aws-ec2-metadata-token-ttl-seconds``. Everything is served as
  ``text/plain``.
- https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
  ``/latest/meta-data/spot/instance-action`` is absent (404) until Amazon EC2
  marks the Spot Instance for interruption, then holds
  ``{"action": "terminate", "time": "2017-09-18T08:22:00Z"}``, issued two
  minutes before the action; ``spot/termination-time`` holds the same time
  (UTC, e.g. ``2015-01-05T18:02:00Z``) and is likewise 404 until then.
- https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
  ``/latest/meta-data/events/recommendations/rebalance`` is 404 until a
  rebalance recommendation, then ``{"noticeTime": "2020-11-05T08:22:00Z"}``;
  the recommendation may come with, not before, the interruption notice.
- https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-categories.html
  ``instance-id``, ``instance-type``, ``instance-life-cycle`` (``spot`` or
  ``on-demand``), ``placement/availability-zone``, ``placement/region``,
  ``local-ipv4`` (the private IPv4 address); a
  directory path lists its keys one a line, sub-directories ending in ``/``.

- https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/monitoring-instances-status-check_sched.html
  ``/latest/meta-data/events/maintenance/scheduled`` lists the instance's
  scheduled events as JSON: ``[{"NotBefore": "21 Jan 2019 09:00:43 GMT",
  "Code": "system-reboot", "Description": "scheduled reboot", "EventId":
  "instance-event-0d59937288b749b32", "NotAfter": "21 Jan 2019 09:17:23 GMT",
  "State": "active"}]``; codes :data:`AWS_MAINTENANCE_CODES`. Served as
  ``[]`` when there is none, on spot and on-demand instances alike.

Token behaviour (option ``tokens``), for the agent's IMDSv1 fallback:
``required`` (the default, ``HttpTokens=required``: a GET without a token is
401), ``optional`` (``HttpTokens=optional``: GETs with or without a token),
``refused`` (the token PUT is 403, as a proxy or firewall that refuses PUTs
answers; GETs without a token are served), ``hang`` (the token PUT is never
answered, as behind ``HttpPutResponseHopLimit`` 1 from a container; GETs
without a token are served). A token that is sent must be valid in every mode.

Local choices: the spot action is always ``terminate`` (the local cloud
reclaims; it neither stops nor hibernates); tokens are random per server and
their TTL is measured on the notice state's clock, so a fast simulated clock
expires them fast too.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import ClassVar

from spothop.providers.base import BillingRule
from spothop.providers.local.metadata._http import (
    NO_ANSWER,
    MetadataHandler,
    Request,
    Response,
    iso_utc,
    issue_token,
    serve_leaves,
)
from spothop.providers.local.metadata.codes import HEX_DIGITS, ErrorCodes, IdQuery, InstanceIdShape
from spothop.providers.local.metadata.state import NoticeSnapshot, ScheduledEvent

AWS_TOKEN_TTL_MIN_S = 1  # IMDSv2 docs: "a minimum of one second"
AWS_TOKEN_TTL_MAX_S = 21600  # IMDSv2 docs: "a maximum of six hours (21,600 seconds)"
AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_SPOT_ACTION = "terminate"  # the local cloud only reclaims; EC2 may also stop or hibernate
ROOT = "/latest"
# EC2 API InstanceStatusEvent: the codes of scheduled events.
AWS_MAINTENANCE_CODES = frozenset(
    {
        "instance-stop",
        "instance-retirement",
        "instance-reboot",
        "system-reboot",
        "system-maintenance",
    }
)
AWS_MAINTENANCE_ENDS = frozenset(
    {"instance-stop", "instance-retirement"}
)  # the instance is stopped or gone after
# Local descriptions (EC2 writes its own words); "[Completed]"/"[Canceled]" are not prefixed here: State says it.
AWS_MAINTENANCE_DESCRIPTIONS = {
    "instance-stop": "The instance is scheduled to be stopped",
    "instance-retirement": "The instance is running on degraded hardware and is scheduled for retirement",
    "instance-reboot": "scheduled reboot",
    "system-reboot": "scheduled reboot",
    "system-maintenance": "scheduled system maintenance",
}
TOKEN_MODES = frozenset({"required", "optional", "refused", "hang"})
TOKEN_HANG_MAX_S = 600.0  # a hung token PUT is let go at the latest then (or when the server stops)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def aws_event_time(ts: float) -> str:
    """``21 Jan 2019 09:00:43 GMT``: a scheduled event's NotBefore/NotAfter (English months, whatever the locale)."""
    t = datetime.fromtimestamp(int(ts), UTC)
    return f"{t.day} {_MONTHS[t.month - 1]} {t.year} {t:%H:%M:%S} GMT"


def scheduled_event_json(event: ScheduledEvent) -> dict[str, str]:
    """One entry of ``events/maintenance/scheduled``, keys as EC2 spells them."""
    return {
        "NotBefore": aws_event_time(event.not_before),
        "Code": event.code,
        "Description": event.description,
        "EventId": event.event_id,
        "NotAfter": aws_event_time(event.not_after),
        "State": event.state,
    }


# EC2 bills Linux instances (on-demand, spot and reserved) per second with a 60-second
# minimum: https://aws.amazon.com/ec2/pricing/ ("Per-second billing").
BILLING = BillingRule(increment_s=1, minimum_s=60, source="https://aws.amazon.com/ec2/pricing/")


# EC2 API error codes (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html)
# and its instance ids ("i-" and 17 hex digits; the local cloud's always start "i-0").
ERROR_CODES = ErrorCodes(
    capacity_unavailable="InsufficientInstanceCapacity",
    instance_not_found="InvalidInstanceID.NotFound",
    invalid_parameter="InvalidParameterValue",
    internal_error="InternalError",
    price_too_low="SpotMaxPriceTooLow",
)
INSTANCE_IDS = InstanceIdShape(prefix="i-0", alphabet=HEX_DIGITS, length=16)


class AwsImdsHandler(MetadataHandler):
    """IMDSv2 with ``HttpTokens=required`` by default; option ``tokens`` as the module says."""

    ID_QUERY = IdQuery(
        token_path=AWS_TOKEN_PATH,
        token_ttl_header=AWS_TOKEN_TTL_HEADER,
        token_header=AWS_TOKEN_HEADER,
    )

    OPTIONS = frozenset({"tokens"})
    OPTION_VALUES: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType(
        {"tokens": TOKEN_MODES}
    )
    MAINTENANCE_CODES = AWS_MAINTENANCE_CODES
    MAINTENANCE_ENDS = AWS_MAINTENANCE_ENDS
    ERROR_CODES = ERROR_CODES
    BILLING = BILLING
    INSTANCE_IDS = INSTANCE_IDS

    @classmethod
    def new_event_id(cls) -> str:
        return (
            "instance-event-" + secrets.token_hex(9)[:17]
        )  # EC2's shape: instance-event-0d59937288b749b32

    @classmethod
    def maintenance_description(cls, code: str) -> str:
        return AWS_MAINTENANCE_DESCRIPTIONS.get(code, code)

    def route(self, request: Request) -> Response:
        mode = self.meta_server.options.get("tokens", "required")
        if request.path.rstrip("/") == AWS_TOKEN_PATH:
            if request.method != "PUT":
                return Response.text("Method Not Allowed\n", 405)
            if mode == "refused":
                return Response.text("Forbidden\n", 403)
            if mode == "hang":
                self.meta_server.stopping.wait(TOKEN_HANG_MAX_S)
                return NO_ANSWER
            return self._issue_token(request)
        if request.method not in ("GET", "HEAD"):
            return Response.text("Method Not Allowed\n", 405)
        token = request.header(AWS_TOKEN_HEADER)
        if token is not None and not self.meta_server.tokens.valid(token):
            return Response.text("Unauthorized\n", 401)
        if token is None and mode == "required":
            return Response.text("Unauthorized\n", 401)
        return serve_leaves(self._leaves(self.notices.snapshot()), ROOT, request.path)

    def _issue_token(self, request: Request) -> Response:
        return issue_token(
            request,
            self.meta_server.tokens,
            AWS_TOKEN_TTL_HEADER,
            AWS_TOKEN_TTL_MIN_S,
            AWS_TOKEN_TTL_MAX_S,
            echo_ttl=True,
        )

    def _leaves(self, notices: NoticeSnapshot) -> dict[str, str]:
        md = self.metadata
        leaves = {
            "meta-data/instance-id": md.instance_id,
            "meta-data/instance-type": md.instance_type,
            "meta-data/instance-life-cycle": "spot" if md.spot else "on-demand",
            "meta-data/placement/availability-zone": md.zone,
            "meta-data/placement/region": md.region,
            "meta-data/local-ipv4": md.private_address,
            "meta-data/events/maintenance/scheduled": json.dumps(
                [scheduled_event_json(e) for e in notices.scheduled_events], separators=(",", ":")
            ),
        }
        if not md.spot:
            return leaves
        if notices.termination_time is not None:
            when = iso_utc(notices.termination_time)
            leaves["meta-data/spot/instance-action"] = json.dumps(
                {"action": AWS_SPOT_ACTION, "time": when}, separators=(",", ":")
            )
            leaves["meta-data/spot/termination-time"] = when
        if notices.advance_notice_time is not None:
            leaves["meta-data/events/recommendations/rebalance"] = json.dumps(
                {"noticeTime": iso_utc(notices.advance_notice_time)}, separators=(",", ":")
            )
        return leaves
