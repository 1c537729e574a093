"""Keeping secrets out of what the server says: every response body and every log line.

- :func:`secret_values` reads the environment once: the value of every variable
  whose name says it is a credential (``SECRET``, ``TOKEN``, ``PASSWORD``,
  ``ACCESS_KEY``, ``PRIVATE``, ``CREDENTIAL``, ``API_KEY``, …) and is long
  enough to be one. A cloud's keys are such variables, whatever the cloud.
- :class:`Redactor` replaces those values, and the secret part of any spothop
  token (``shp_<kind>_<id>_<secret>``, the id is kept: it names the token
  without being it), with ``***``.
- :class:`RedactingFilter` runs the redactor over each log record's message;
  :func:`install_log_filter` puts it on the handlers of the root and uvicorn loggers.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping

SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE|CREDENTIAL|API_KEY|AUTH|SESSION",
    re.IGNORECASE,
)
MIN_SECRET_LENGTH = 8  # shorter values ("1", "true", a region) would redact ordinary words
TOKEN_SECRET = re.compile(r"\b(shp_[ua]_[0-9a-f]{16}_)[A-Za-z0-9_-]{8,}")
MASK = "***"


def secret_values(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    env = os.environ if environ is None else environ
    return frozenset(
        v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_LENGTH
    )


class Redactor:
    """Replaces known secret values and token secrets in text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted(set(secrets), key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self._values is not None:
            text = self._values.sub(MASK, text)
        return TOKEN_SECRET.sub(lambda m: m.group(1) + MASK, text)

    def bytes(self, body: bytes) -> bytes:
        """The redacted body (bytes that are not UTF-8 are returned as they are)."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return body
        cleaned = self(text)
        return body if cleaned == text else cleaned.encode("utf-8")


class RedactingFilter(logging.Filter):
    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logged as it is
            return True
        cleaned = self.redactor(message)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


LOGGERS = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "spothop")


def install_log_filter(redactor: Redactor) -> None:
    """The filter on every handler of the root, uvicorn and spothop loggers (once each)."""
    for name in LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter(redactor))
