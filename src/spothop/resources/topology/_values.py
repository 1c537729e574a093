"""Reading nvidia-smi's values: 'N/A' and blanks mean unknown; '81920 MiB' and '16x' lead with a number."""

from __future__ import annotations

import re

_LEADING_INT = re.compile(r"^\s*(\d+)")
UNKNOWN = ("", "N/A", "[N/A]")


def known_text(value: str | None) -> str | None:
    """The stripped value, or None when nvidia-smi said it does not know."""
    if value is None:
        return None
    value = value.strip()
    return None if value in UNKNOWN else value


def leading_int(value: str | None) -> int | None:
    """The leading integer of '81920 MiB', '16x', '4'; None for N/A or missing."""
    text = known_text(value)
    match = _LEADING_INT.match(text) if text else None
    return int(match.group(1)) if match else None
