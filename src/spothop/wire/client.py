"""The one small HTTP client of ``spothop server``: JSON over standard-library ``urllib``, a bearer token.

The agent's HTTP control plane (:mod:`spothop.controlplane.http`), the HTTP
shard queue (:mod:`spothop.queue.http_backend`) and the CLI's remote mode
(:mod:`spothop.cli.remote`) send through it (a ground-floor module: it imports
only the standard library), and each turns its three failures into its own
errors and messages:

- :class:`HttpStatus` — the server answered 4xx or 5xx: its ``code``, the
  first :data:`ERROR_BODY_BYTES` of its body, its headers (``Retry-After``);
  :attr:`HttpStatus.auth` for 401 and 403 (a wrong token is not an outage),
  :attr:`HttpStatus.retryable` for 429 and the 5xx a restarting or busy server
  gives;
- :class:`Unreachable` — no answer: refused, unresolvable, timed out, reset;
  :attr:`Unreachable.refused` when the connection was refused (the request
  never reached the server, so it cannot have been done twice);
- :class:`NotJson` — a 2xx whose body is not JSON (an empty body is None).

Every call has a timeout. :func:`retrying` makes bounded tries with the delay
its caller gives (:func:`full_jitter_s`: exponential backoff with full jitter,
``base × 2^k`` capped); :class:`OutageWindow` keeps a dead server alone for a
while after a call failed all its tries, so it costs the caller nothing.

The token is sent only in the ``Authorization`` header: never logged, and
``repr`` hides it.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from email.message import Message
from typing import Any, BinaryIO, TypeVar

ERROR_BODY_BYTES = 64 * 1024  # enough for any error spothop server writes
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
_T = TypeVar("_T")


class HttpStatus(Exception):
    """The server answered ``code`` (4xx or 5xx) with ``body`` (its first bytes) and ``headers``."""

    def __init__(self, code: int, body: bytes, headers: Message | None) -> None:
        super().__init__(f"HTTP {code}")
        self.code = code
        self.body = body
        self.headers = headers

    @property
    def auth(self) -> bool:
        """401 or 403: the token was refused; retrying will not help."""
        return self.code in (401, 403)

    @property
    def retryable(self) -> bool:
        """429 or a 5xx a restarting or busy server gives (:data:`RETRIED_STATUSES`)."""
        return self.code in RETRIED_STATUSES


class Unreachable(Exception):
    """No answer: ``error`` is what ``urllib`` raised, ``reason`` its reason (the error itself if none)."""

    def __init__(self, error: OSError) -> None:
        self.error = error
        self.reason: object = getattr(error, "reason", error)
        super().__init__(f"{type(error).__name__}: {self.reason}")

    @property
    def refused(self) -> bool:
        """The connection was refused: the request never reached the server."""
        return isinstance(self.reason, ConnectionRefusedError)


class NotJson(Exception):
    """A 2xx answer whose body (``raw``) is not JSON."""

    def __init__(self, raw: bytes) -> None:
        super().__init__(f"an answer that is not JSON: {raw[:200]!r}")
        self.raw = raw


class JsonClient:
    """``spothop server`` at ``base_url`` (``http(s)://host[:port][/prefix]``, no trailing slash)."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout_s: float,
        user_agent: str | None = None,
    ) -> None:
        self.base_url = base_url
        self._token = token
        self.timeout_s = timeout_s
        self.user_agent = user_agent

    def __repr__(self) -> str:
        return f"JsonClient({self.base_url!r}, token={'***' if self._token else None})"

    def send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        upload: tuple[BinaryIO, int, str] | None = None,
    ) -> Any:
        """One try: the decoded JSON answer (None for an empty body); raises the module's failures.

        ``params`` go in the query string (None values left out); ``body`` is sent as JSON (a
        value JSON cannot hold as its ``str``); ``upload`` ``(file, size_bytes, content_type)``
        is sent as the body instead, streamed from ``file`` (read in blocks, never whole);
        ``timeout_s`` defaults to the client's."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        url = self.base_url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Accept": "application/json"}
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data: bytes | BinaryIO | None = None
        if body is not None:
            data = json.dumps(body, default=str).encode()
            headers["Content-Type"] = "application/json"
        elif upload is not None:
            data, size_bytes, headers["Content-Type"] = upload
            headers["Content-Length"] = str(size_bytes)
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise HttpStatus(exc.code, exc.read(ERROR_BODY_BYTES), exc.headers) from exc
        except (urllib.error.URLError, OSError) as exc:  # refused, unresolvable, timed out, reset
            raise Unreachable(exc) from exc
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise NotJson(raw) from exc


def full_jitter_s(attempt: int, base_s: float, max_s: float) -> float:
    """The wait after failed try ``attempt`` (0 for the first): uniform in ``[0, min(max_s, base_s × 2^attempt)]``."""
    return random.uniform(0, min(max_s, base_s * 2**attempt))


def retrying(
    once: Callable[[], _T],
    *,
    attempts: int,
    retry: Callable[[Exception], bool],
    delay_s: Callable[[int, Exception], float],
) -> _T:
    """``once()`` tried up to ``attempts`` times; a failure ``retry`` accepts is tried again after
    ``delay_s(k, failure)`` (``k``: the failed try, 0 first); the last failure, or one ``retry``
    refuses, is raised as it is."""
    for attempt in range(attempts):
        try:
            return once()
        except Exception as exc:
            if attempt == attempts - 1 or not retry(exc):
                raise
            time.sleep(delay_s(attempt, exc))
    raise ValueError(f"attempts must be at least 1; got {attempts}")


class OutageWindow:
    """How long a server that failed is left alone: no call is tried before :meth:`left_s` is 0.

    Each :meth:`failed` doubles the window (from ``base_s``, at most ``max_s``) and
    draws its end with jitter in ``[window/2, window]``; :meth:`succeeded` closes it."""

    def __init__(self, base_s: float, max_s: float) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.window_s = 0.0
        self.until = 0.0  # monotonic; no call is tried before it

    def left_s(self) -> float:
        return max(0.0, self.until - time.monotonic())

    def failed(self) -> None:
        self.window_s = min(self.max_s, max(self.base_s, self.window_s * 2))
        self.until = time.monotonic() + random.uniform(self.window_s / 2, self.window_s)

    def succeeded(self) -> None:
        self.window_s = 0.0
