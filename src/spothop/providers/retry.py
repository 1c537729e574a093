"""A cloud's error codes turned into spothop's error types, and the bounded retry of throttled calls.

Every adapter keeps its cloud's codes as the cloud spells them in
``ProviderError.code``; :class:`CodeTable` holds them, one set per spothop
error type, and :meth:`CodeTable.map_error` turns one code into the error
(a throttle code is :class:`~spothop.errors.RateLimited`, an unknown code a
plain :class:`~spothop.errors.ProviderError`, a hint where the table has one).

:func:`with_retries` runs a call and retries it while the cloud throttles it,
with exponential backoff and full jitter: the wait before retry ``n`` is
uniform in ``[0, min(cap, base × 2ⁿ)]``, never less than the cloud's
Retry-After when it sends one (:func:`backoff_s`); at most ``attempts`` calls
in all, then it is RateLimited. Nothing else is retried. The adapter's
``classify`` says what one of its SDK's exceptions is (:data:`Classify`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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

T = TypeVar("T")

RETRY_ATTEMPTS = 5  # calls in all, the first included
RETRY_BASE_S = 0.5  # the first backoff window
RETRY_CAP_S = 20.0  # no window is wider than this

# What ``classify`` answers for an exception: (code, message, retry-after seconds or None) of a
# cloud error to map through the table (and retry if it is a throttle); a ProviderError to raise
# as it is (no credentials, no answer from the endpoint); None for an exception not the SDK's,
# which goes on up unchanged.
Classified = tuple[str, str, float | None] | ProviderError | None
Classify = Callable[[Exception, str], Classified]


@dataclass(frozen=True)
class CodeTable:
    """One cloud's error codes, by the spothop error each one is; ``hints`` by code."""

    rate_limit: frozenset[str]
    capacity: frozenset[str]
    quota: frozenset[str]
    auth: frozenset[str]
    price: frozenset[str]
    not_found: frozenset[str]
    invalid: frozenset[str]
    hints: Mapping[str, str] = field(default_factory=dict)
    # Codes that hold in the call's region only (a region not enabled, a regional resource's id
    # not found there): the error is marked ``region_scoped``, and a job stops trying that
    # provider in that region only, not the provider.
    region_scoped: frozenset[str] = frozenset()

    def map_error(
        self, provider: str, code: str, message: str, retry_after_s: float | None = None
    ) -> ProviderError:
        """The spothop error for one code; unknown codes are a plain ProviderError."""
        error = self._error(provider, code, message, retry_after_s)
        error.region_scoped = code in self.region_scoped
        return error

    def _error(
        self, provider: str, code: str, message: str, retry_after_s: float | None
    ) -> ProviderError:
        hint = self.hints.get(code, "")
        if code in self.rate_limit:
            return RateLimited(provider, code, message, retry_after_s)
        for codes, kind in (
            (self.capacity, CapacityUnavailable),
            (self.quota, QuotaExceeded),
            (self.auth, AuthFailed),
            (self.price, PriceTooLow),
            (self.not_found, InstanceNotFound),
            (self.invalid, InvalidRequest),
        ):
            if code in codes:
                return kind(provider, code, message, hint)
        return ProviderError(provider, code, message, hint)


def backoff_s(
    attempt: int,
    retry_after_s: float | None,
    *,
    base_s: float = RETRY_BASE_S,
    cap_s: float = RETRY_CAP_S,
    jitter: Callable[[], float] = random.random,
) -> float:
    """The wait after failed call ``attempt`` (0-based): full jitter, at least the Retry-After."""
    window_s = min(cap_s, base_s * float(2**attempt))
    return max(retry_after_s or 0.0, jitter() * window_s)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of ``str(exc)``, at most ``limit`` characters ("" when it is empty)."""
    text = str(exc)
    return text.splitlines()[0][:limit] if text else ""


def with_retries(
    call: Callable[[], T],
    provider: str,
    sleep: Callable[[float], None],
    table: CodeTable,
    classify: Classify,
    *,
    attempts: int = RETRY_ATTEMPTS,
    base_s: float = RETRY_BASE_S,
    cap_s: float = RETRY_CAP_S,
    jitter: Callable[[], float] = random.random,
) -> T:
    """``call()``, retried while the cloud throttles it; the SDK's errors come out as spothop's.

    Waits come from ``sleep`` (the provider's clock), so tests never wait. A
    call still throttled after ``attempts`` calls raises RateLimited with the
    cloud's code and says so in its message.
    """
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            classified = classify(exc, provider)
            if classified is None:
                raise
            if isinstance(classified, ProviderError):
                raise classified from None
            code, message, retry_after = classified
            throttled = code in table.rate_limit
            if not throttled or attempt == attempts - 1:
                if throttled:
                    message = f"{message} (still throttled after {attempts} calls with backoff)"
                raise table.map_error(provider, code, message, retry_after) from None
            sleep(backoff_s(attempt, retry_after, base_s=base_s, cap_s=cap_s, jitter=jitter))
    raise AssertionError("unreachable: the last attempt raises or returns")


@dataclass(frozen=True)
class Retrying:
    """:func:`with_retries` bound to one cloud's ``table`` and ``classify``: what an adapter
    exports as its ``with_retries(call, provider, sleep, *, attempts=…, jitter=…)``."""

    table: CodeTable
    classify: Classify

    def __call__(
        self,
        call: Callable[[], T],
        provider: str,
        sleep: Callable[[float], None],
        *,
        attempts: int = RETRY_ATTEMPTS,
        base_s: float = RETRY_BASE_S,
        cap_s: float = RETRY_CAP_S,
        jitter: Callable[[], float] = random.random,
    ) -> T:
        """``call()``, retried while the cloud throttles it (see :func:`with_retries`)."""
        return with_retries(
            call,
            provider,
            sleep,
            self.table,
            self.classify,
            attempts=attempts,
            base_s=base_s,
            cap_s=cap_s,
            jitter=jitter,
        )
