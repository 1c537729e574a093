"""ECS's error codes turned into spothop's error types, and the bounded retry of throttled calls.

Codes are ECS's own (``Code`` of the error answer), kept as spelled in
``ProviderError.code``; those the local cloud also raises come from
:data:`spothop.providers.local.metadata.aliyun.ERROR_CODES`. A throttled
call (``Throttling``, ``Throttling.User``, …) is retried with exponential
backoff and full jitter, at most :data:`RETRY_ATTEMPTS` calls, then it is
:class:`~spothop.errors.RateLimited`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from spothop.errors import (
    AuthFailed,
    CapacityUnavailable,
    InstanceNotFound,
    InvalidRequest,
    PriceTooLow,
    ProviderError,
    QuotaExceeded,
    RateLimited,
)
from spothop.providers.local.metadata.aliyun import ERROR_CODES

T = TypeVar("T")

RETRY_ATTEMPTS = 5
RETRY_BASE_S = 0.5
RETRY_CAP_S = 20.0

CAPACITY_CODES = frozenset(
    {
        ERROR_CODES.capacity_unavailable,  # OperationDenied.NoStock
        "OperationDenied.NoSpotStock",
        "Zone.NotOnSale",
        "InvalidResourceType.NotSupported",
        "OperationDenied.ZoneSoldOut",
    }
)
QUOTA_CODES = frozenset(
    {
        "QuotaExceed.PostPaidInstance",
        "QuotaExceed.ElasticQuota",
        "QuotaExceed.PreemptibleInstance",
        "InvalidParameter.ExceedInstanceTypeQuota",
        "Account.Arrearage",
    }
)
AUTH_CODES = frozenset(
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
)
RATE_LIMIT_CODES = frozenset(
    {"Throttling", "Throttling.User", "Throttling.Api", "ServiceUnavailable", "Throttling.Resource"}
)
PRICE_CODES = frozenset({ERROR_CODES.price_too_low or "InvalidSpotPriceLimit.LowerThanPublicPrice"})
NOT_FOUND_CODES = frozenset({ERROR_CODES.instance_not_found, "InvalidInstanceId.NotFound"})
INVALID_CODES = frozenset(
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
)
_HINTS = {
    "OperationDenied.NoStock": "the zone has no stock of this type now; try another zone or type, or later",
    "QuotaExceed.PostPaidInstance": "the account's pay-as-you-go quota is used up; ask for more in Quota Center",
    "Forbidden.RAM": "the RAM user lacks a permission; the message names the action",
}


def map_error(
    provider: str, code: str, message: str, retry_after_s: float | None = None
) -> ProviderError:
    """The spothop error for one ECS code; unknown codes are a plain ProviderError."""
    hint = _HINTS.get(code, "")
    if code in RATE_LIMIT_CODES:
        return RateLimited(provider, code, message, retry_after_s)
    for codes, kind in (
        (CAPACITY_CODES, CapacityUnavailable),
        (QUOTA_CODES, QuotaExceeded),
        (AUTH_CODES, AuthFailed),
        (PRICE_CODES, PriceTooLow),
        (NOT_FOUND_CODES, InstanceNotFound),
        (INVALID_CODES, InvalidRequest),
    ):
        if code in codes:
            return kind(provider, code, message, hint)
    return ProviderError(provider, code, message, hint)


def with_retries(
    call: Callable[[], T],
    provider: str,
    sleep: Callable[[float], None],
    *,
    attempts: int = RETRY_ATTEMPTS,
    jitter: Callable[[], float] = random.random,
) -> T:
    """``call()``, retried while ECS throttles it; the SDK's errors come out as spothop's."""
    from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
    from darabonba.exceptions import DaraException, RetryError

    for attempt in range(attempts):
        try:
            return call()
        except AlibabaCloudException as exc:
            code = str(exc.code or type(exc).__name__)
            message = str(exc.message or exc)
            retry_after = (
                float(exc.retry_after) / 1000 if getattr(exc, "retry_after", None) else None
            )
            if code not in RATE_LIMIT_CODES or attempt == attempts - 1:
                if code in RATE_LIMIT_CODES:
                    message = f"{message} (still throttled after {attempts} calls with backoff)"
                raise map_error(provider, code, message, retry_after) from None
            sleep(max(retry_after or 0.0, jitter() * min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt)))
        except (DaraException, RetryError, OSError) as exc:  # no answer, or not an ECS answer
            raise ProviderError(
                provider, type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""
            ) from None
    raise AssertionError("unreachable: the last attempt raises or returns")
