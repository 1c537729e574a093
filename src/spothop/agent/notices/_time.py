"""Reading the clouds' time stamps. Every parser returns unix seconds, or None for a string it cannot read."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime, timedelta, timezone

# AWS, Alibaba and (assumed) Volcengine print ISO 8601 UTC, e.g. "2015-01-05T18:02:00Z".
_ISO_FORMATS = ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ")
# Tencent prints the reclaim time as "2018-08-18 12:05:33", the instance's OS time in UTC+8
# (tencentcloud.com/document/product/213/32487).
CHINA_STANDARD_TIME = timezone(timedelta(hours=8), "CST")
_TENCENT_FORMAT = "%Y-%m-%d %H:%M:%S"


def parse_iso_utc(text: str) -> float | None:
    """``2015-01-05T18:02:00Z`` (or with an explicit offset) → unix seconds."""
    value = text.strip()
    for fmt in _ISO_FORMATS:
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_china_standard(text: str) -> float | None:
    """``2018-08-18 12:05:33`` in UTC+8 → unix seconds; an ISO string with a zone is read as such."""
    value = text.strip()
    try:
        return (
            datetime.strptime(value, _TENCENT_FORMAT)
            .replace(tzinfo=CHINA_STANDARD_TIME)
            .timestamp()
        )
    except ValueError:
        return parse_iso_utc(value) if value.endswith("Z") else None


def parse_rfc1123(text: str) -> float | None:
    """``Mon, 19 Sep 2016 18:29:47 GMT`` (Azure's NotBefore) or ``21 Jan 2019 09:00:43 GMT`` (AWS
    scheduled events' NotBefore, no weekday) → unix seconds."""
    try:
        parsed = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
