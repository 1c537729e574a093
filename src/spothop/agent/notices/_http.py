"""The one HTTP call every watcher makes: stdlib ``urllib``, always with a timeout.

A network failure (refused, reset, timed out) raises
:class:`~spothop.wire.errors.NoticeEndpointError` — :class:`EndpointTimeout`,
a subclass, when the endpoint took the request but never answered in time;
any HTTP status, 4xx and 5xx included, comes back as a :class:`Reply` for the
watcher to judge, since a 404 is often the answer "no notice".
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from spothop.agent.errors import NoticeEndpointError

MAX_REPLY_BYTES = 64 * 1024  # a metadata answer is a few hundred bytes; more is garbage


class EndpointTimeout(NoticeEndpointError):
    """No answer within the timeout: the request may never have reached the endpoint, or its answer was dropped.

    AWS's token PUT behind a hop limit of 1 looks like this: the answer is
    dropped on its way into a container, so the client waits it out.
    """


@dataclass(frozen=True)
class Reply:
    status: int
    body: str
    headers: Mapping[str, str] = field(default_factory=dict)  # keys lower-cased

    @property
    def server_error(self) -> bool:
        return self.status >= 500


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A metadata endpoint never redirects; following one would leave the link-local address.
    def redirect_request(self, *_args: object, **_kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))


def fetch(
    method: str,
    url: str,
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
) -> Reply:
    """One request; no proxies, no redirects. Raises NoticeEndpointError on any transport failure."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            raw = response.read(MAX_REPLY_BYTES)
            return Reply(
                response.status,
                raw.decode("utf-8", "replace"),
                {k.lower(): v for k, v in response.headers.items()},
            )
    except urllib.error.HTTPError as exc:
        try:
            raw = exc.read(MAX_REPLY_BYTES)
        except OSError:
            raw = b""
        return Reply(
            exc.code, raw.decode("utf-8", "replace"), {k.lower(): v for k, v in exc.headers.items()}
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        # urllib wraps a timeout while sending in URLError; one while waiting for the answer comes bare.
        if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
            raise EndpointTimeout(
                f"{method} {url}: timed out, no answer within {timeout_s:g} s"
            ) from exc
        raise NoticeEndpointError(f"{method} {url}: {exc}") from exc
