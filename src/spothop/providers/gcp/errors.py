"""Compute Engine's errors turned into spothop's, and the bounded retry of throttled calls.

Compute Engine reports a failure in two ways, both kept as the cloud spells them:

- an HTTP error (``google.api_core.exceptions.GoogleAPICallError``) whose
  body names a ``reason`` (``notFound``, ``invalid``, ``quotaExceeded``,
  ``rateLimitExceeded``, ``forbidden``, …);
- an insert that was accepted but failed: the operation ends ``DONE`` with
  ``error.errors[].code`` (``ZONE_RESOURCE_POOL_EXHAUSTED``,
  ``QUOTA_EXCEEDED``, ``RESOURCE_NOT_FOUND``, …).

The codes the local cloud also raises come from
:data:`spothop.providers.local.metadata.gcp.ERROR_CODES`. A throttled call is
retried with exponential backoff and full jitter, at most
:data:`RETRY_ATTEMPTS` calls, then it is :class:`~spothop.errors.RateLimited`.
"""

from __future__ import annotations

from typing import Any

from spothop.errors import AuthFailed, InstanceNotFound, InvalidRequest, ProviderError
from spothop.providers import retry
from spothop.providers.local.metadata.gcp import ERROR_CODES

RETRY_ATTEMPTS = retry.RETRY_ATTEMPTS

_HINTS = {
    "QUOTA_EXCEEDED": "the project's quota (the message names it) is used up; ask for more in IAM & Admin > Quotas",
    "forbidden": "the credentials lack a permission on the project; the message names it",
    "accessNotConfigured": "the Compute Engine API is not enabled for the project; enable compute.googleapis.com",
    "ZONE_RESOURCE_POOL_EXHAUSTED": "the zone has no capacity for this machine now; try another zone or later",
}

TABLE = retry.CodeTable(
    rate_limit=frozenset(
        {"rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED", "RESOURCE_EXHAUSTED"}
    ),
    capacity=frozenset(
        {
            ERROR_CODES.capacity_unavailable,  # ZONE_RESOURCE_POOL_EXHAUSTED
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
            "RESOURCE_POOL_EXHAUSTED",
            "resourcePoolExhausted",
            "UNSUPPORTED_OPERATION",  # the accelerator is not offered with that machine there
        }
    ),
    quota=frozenset({"QUOTA_EXCEEDED", "quotaExceeded", "limitExceeded"}),
    auth=frozenset(
        {
            "authError",
            "required",
            "forbidden",
            "insufficientPermissions",
            "accessNotConfigured",
            "SERVICE_DISABLED",
            "PERMISSION_DENIED",
            "UNAUTHENTICATED",
            "NoCredentials",
        }
    ),
    # A bid under the market: Compute Engine takes none, so the adapter refuses it with this code.
    price=frozenset(),
    not_found=frozenset({ERROR_CODES.instance_not_found, "RESOURCE_NOT_FOUND"}),
    invalid=frozenset(
        {
            ERROR_CODES.invalid_parameter,
            "badRequest",
            "invalidParameter",
            "conditionNotMet",
            "alreadyExists",
        }
    ),
    hints=_HINTS,
    # An organization policy's resource locations (constraints/gcp.resourceLocations) refuse
    # the region, not the project: another region may take the same request.
    region_scoped=frozenset({"conditionNotMet"}),
)


map_error = TABLE.map_error

IMAGE_FIX = (
    "set image= or SPOTHOP_GCP_IMAGE to an image (or image family) the project may use, with "
    "NVIDIA drivers and Python 3.11+"
)


def missing_resource(provider: str, error: ProviderError) -> ProviderError:
    """What a ``notFound`` answer to an insert is: never the instance (it does not exist yet) but
    a resource the launch names (the boot image, a network, a subnetwork), which every launch
    would name again: a refused request (the image's fix named), not an instance gone."""
    if not isinstance(error, InstanceNotFound):
        return error
    message = error.cloud_message
    hint = IMAGE_FIX if "/images/" in message else "the message names the missing resource"
    return InvalidRequest(provider, error.code, message, hint)


def api_error_parts(exc: Any) -> tuple[str, str]:
    """(code, message) of a GoogleAPICallError: the body's first ``reason``, else its status."""
    reason = None
    for error in getattr(exc, "errors", None) or []:
        if isinstance(error, dict) and error.get("reason"):
            reason = str(error["reason"])
            break
    reason = reason or getattr(exc, "reason", None)
    if not reason:
        status = getattr(exc, "code", None)
        reason = {
            404: "notFound",
            400: "invalid",
            403: "forbidden",
            401: "authError",
            429: "rateLimitExceeded",
        }.get(int(status) if isinstance(status, int) else 0, type(exc).__name__)
    return str(reason), str(getattr(exc, "message", None) or exc)


def classify(exc: Exception, provider: str) -> retry.Classified:
    """What one Google client exception is (see :data:`spothop.providers.retry.Classify`)."""
    from google.api_core.exceptions import GoogleAPICallError
    from google.auth.exceptions import GoogleAuthError
    from requests.exceptions import RequestException

    if isinstance(exc, GoogleAuthError):
        return AuthFailed(provider, type(exc).__name__, str(exc)[:300])
    if isinstance(exc, RequestException):  # no answer from the endpoint
        return ProviderError(provider, type(exc).__name__, retry.first_line(exc))
    if isinstance(exc, GoogleAPICallError):
        code, message = api_error_parts(exc)
        return code, message, None
    return None


with_retries = retry.Retrying(TABLE, classify)
