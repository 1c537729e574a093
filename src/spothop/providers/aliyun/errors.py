"""ECS's error codes turned into spothop's error types, and the bounded retry of throttled calls.

Codes are ECS's own (``Code`` of the error answer), kept as spelled in
``ProviderError.code``; those the local cloud also raises come from
:data:`spothop.providers.local.metadata.aliyun.ERROR_CODES`. A throttled
call (``Throttling``, ``Throttling.User``, …) is retried with exponential
backoff and full jitter, at most :data:`RETRY_ATTEMPTS` calls, then it is
:class:`~spothop.errors.RateLimited`.
"""

from __future__ import annotations

from spothop.errors import ProviderError
from spothop.providers import retry
from spothop.providers.local.metadata.aliyun import ERROR_CODES

RETRY_ATTEMPTS = retry.RETRY_ATTEMPTS

_HINTS = {
    "OperationDenied.NoStock": "the zone has no stock of this type now; try another zone or type, or later",
    "QuotaExceed.PostPaidInstance": "the account's pay-as-you-go quota is used up; ask for more in Quota Center",
    "Forbidden.RAM": "the RAM user lacks a permission; the message names the action",
}

TABLE = retry.CodeTable(
    rate_limit=frozenset(
        {
            "Throttling",
            "Throttling.User",
            "Throttling.Api",
            "ServiceUnavailable",
            "Throttling.Resource",
        }
    ),
    capacity=frozenset(
        {
            ERROR_CODES.capacity_unavailable,  # OperationDenied.NoStock
            "OperationDenied.NoSpotStock",
            "Zone.NotOnSale",
            "InvalidResourceType.NotSupported",
            "OperationDenied.ZoneSoldOut",
        }
    ),
    quota=frozenset(
        {
            "QuotaExceed.PostPaidInstance",
            "QuotaExceed.ElasticQuota",
            "QuotaExceed.PreemptibleInstance",
            "InvalidParameter.ExceedInstanceTypeQuota",
            "Account.Arrearage",
        }
    ),
    auth=frozenset(
        {
            "InvalidAccessKeyId.NotFound",
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "IncompleteSignature",
            "Forbidden",
            "Forbidden.RAM",
            "Forbidden.NotAuthorized",
            "InvalidSecurityToken.Expired",
            "NoCredentials",
        }
    ),
    price=frozenset({ERROR_CODES.price_too_low or "InvalidSpotPriceLimit.LowerThanPublicPrice"}),
    not_found=frozenset({ERROR_CODES.instance_not_found, "InvalidInstanceId.NotFound"}),
    invalid=frozenset(
        {
            ERROR_CODES.invalid_parameter,  # InvalidParameter
            "MissingParameter",
            "InvalidInstanceType.ValueUnauthorized",
            "InvalidInstanceType.ValueNotSupported",
            "InvalidImageId.NotFound",
            "InvalidSecurityGroupId.NotFound",
            "InvalidVSwitchId.NotFound",
            "InvalidRegionId.NotFound",
            "InvalidZoneId.NotFound",
            "InvalidSpotDuration",
        }
    ),
    hints=_HINTS,
    # Images, security groups and vSwitches are regional resources, and a region may be closed
    # to the account: the same request may succeed in another region.
    region_scoped=frozenset(
        {
            "InvalidImageId.NotFound",
            "InvalidSecurityGroupId.NotFound",
            "InvalidVSwitchId.NotFound",
            "InvalidRegionId.NotFound",
        }
    ),
)


map_error = TABLE.map_error


def classify(exc: Exception, provider: str) -> retry.Classified:
    """What one Alibaba Cloud SDK exception is (see :data:`spothop.providers.retry.Classify`)."""
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
    from darabonba.exceptions import DaraException, RetryError

    if isinstance(exc, AlibabaCloudException):
        retry_after = float(exc.retry_after) / 1000 if getattr(exc, "retry_after", None) else None
        return str(exc.code or type(exc).__name__), str(exc.message or exc), retry_after
    if isinstance(exc, (DaraException, RetryError, OSError)):  # no answer, or not an ECS answer
        return ProviderError(provider, type(exc).__name__, retry.first_line(exc))
    return None


with_retries = retry.Retrying(TABLE, classify)
