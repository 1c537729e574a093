"""EC2's error codes turned into spothop's error types, and the bounded retry of throttled calls.

The codes are EC2's own (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html),
kept as the cloud spells them in ``ProviderError.code``. The codes the local
cloud also raises come from its protocol table
(:data:`spothop.providers.local.metadata.aws.ERROR_CODES`), so the simulated
and the real adapter cannot disagree on them.

A throttled call (``RequestLimitExceeded`` and its cousins) is retried with
exponential backoff and full jitter (the delay before retry ``n`` is uniform in
``[0, min(cap, base × 2ⁿ)]``), at most :data:`RETRY_ATTEMPTS` calls in all;
then it is :class:`~spothop.errors.RateLimited`. Nothing else is retried here.
An endpoint that does not answer, or answers with what is not an AWS reply,
is a :class:`~spothop.errors.ProviderError` coded with botocore's exception
name (``EndpointConnectionError``, ``ResponseParserError``).
"""

from __future__ import annotations

from typing import Any

from spothop.errors import AuthFailed, ProviderError
from spothop.providers import retry
from spothop.providers.local.metadata.aws import ERROR_CODES

RETRY_ATTEMPTS = retry.RETRY_ATTEMPTS  # calls in all, the first included

_AMI_FIX = (
    "set image_id= or SPOTHOP_AWS_IMAGE_ID to an AMI of this region that the account may "
    "launch, with NVIDIA drivers and Python 3.11+"
)
_HINTS = {
    "OptInRequired": "the account has not enabled this region or service; enable it in the console, or pick another region",
    "UnauthorizedOperation": "the credentials lack a permission; the message names the action",
    "MaxSpotInstanceCountExceeded": "the account's spot instance quota is used up; ask for more in Service Quotas",
    "VcpuLimitExceeded": "the account's vCPU quota for this instance family is used up; ask for more in Service Quotas",
    "InstanceLimitExceeded": "the account's instance quota in this region is used up; ask for more in Service Quotas",
    # Configuration the user gives the adapter: the hint names the option that fixes it.
    "InvalidAMIID.NotFound": _AMI_FIX,
    "InvalidAMIID.Malformed": _AMI_FIX,
    "InvalidGroup.NotFound": "set security_group_ids= or SPOTHOP_AWS_SECURITY_GROUP_IDS to groups of this region's VPC",
    "InvalidKeyPair.NotFound": "set key_name= or SPOTHOP_AWS_KEY_NAME to a key pair of this region, or leave it out",
    # IAM's code for an instance profile that does not exist (EC2 itself says
    # InvalidParameterValue, "Invalid IAM Instance Profile name", refused the same way).
    "NoSuchEntity": "set instance_profile= or SPOTHOP_AWS_INSTANCE_PROFILE to an instance profile of this account, or leave it out",
}

TABLE = retry.CodeTable(
    rate_limit=frozenset(
        {
            "RequestLimitExceeded",
            "Throttling",
            "ThrottlingException",
            "RequestThrottled",
            "TooManyRequestsException",
            "SlowDown",
        }
    ),
    capacity=frozenset(
        {
            ERROR_CODES.capacity_unavailable,  # InsufficientInstanceCapacity
            "InsufficientHostCapacity",
            "InsufficientReservedInstanceCapacity",
            "InsufficientCapacity",
            "Unsupported",  # the type is not offered in that zone (now)
        }
    ),
    quota=frozenset(
        {
            "MaxSpotInstanceCountExceeded",
            "InstanceLimitExceeded",
            "VcpuLimitExceeded",
            "MaxSpotFleetRequestCountExceeded",
            "MaxFleetCountExceeded",
            "ResourceLimitExceeded",
        }
    ),
    auth=frozenset(
        {
            "UnauthorizedOperation",
            "AuthFailure",
            "InvalidClientTokenId",
            "ExpiredToken",
            "RequestExpired",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "AccessDeniedException",
            "OptInRequired",
            "PendingVerification",
            "Blocked",
        }
    ),
    price=frozenset({ERROR_CODES.price_too_low or "SpotMaxPriceTooLow"}),
    not_found=frozenset(
        {ERROR_CODES.instance_not_found, "InvalidInstanceID.Malformed", "InvalidInstanceID"}
    ),
    invalid=frozenset(
        {
            ERROR_CODES.invalid_parameter,  # InvalidParameterValue
            "InvalidParameterCombination",
            "InvalidParameter",
            "InvalidInstanceType",
            "InvalidAMIID.NotFound",
            "InvalidAMIID.Malformed",
            "InvalidSubnetID.NotFound",
            "InvalidGroup.NotFound",
            "InvalidKeyPair.NotFound",
            "NoSuchEntity",
            "InvalidUserData.Malformed",
            "MissingParameter",
            "ValidationError",
        }
    ),
    # An AMI, security group or subnet exists in one region only, and a region is enabled (opted
    # in) or not: these refuse that region, not the provider. UnauthorizedOperation stays
    # provider-wide: the same code says a policy blocks a region or the credentials lack an action.
    region_scoped=frozenset(
        {
            "OptInRequired",
            "InvalidAMIID.NotFound",
            "InvalidGroup.NotFound",
            "InvalidSubnetID.NotFound",
        }
    ),
    hints=_HINTS,
)


def client_error_parts(exc: BaseException) -> tuple[str, str, float | None]:
    """(code, message, retry-after seconds or None) of a botocore ``ClientError``."""
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    error = response.get("Error") or {}
    code = str(error.get("Code") or type(exc).__name__)
    message = str(error.get("Message") or exc)
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    retry_after = headers.get("retry-after")
    try:
        seconds = float(retry_after) if retry_after is not None else None
    except ValueError:
        seconds = None
    return code, message, seconds


map_error = TABLE.map_error


def classify(exc: Exception, provider: str) -> retry.Classified:
    """What one botocore exception is (see :data:`spothop.providers.retry.Classify`)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    from botocore.parsers import ResponseParserError

    if isinstance(exc, NoCredentialsError):
        return AuthFailed(provider, "NoCredentials", str(exc))
    if isinstance(exc, (BotoCoreError, ResponseParserError)):
        # no answer, or one that is not EC2's (a proxy's HTML page)
        return ProviderError(provider, type(exc).__name__, retry.first_line(exc))
    if isinstance(exc, ClientError):
        return client_error_parts(exc)
    return None


with_retries = retry.Retrying(TABLE, classify)
