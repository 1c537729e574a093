"""Failed authentication is rate-limited per client address (429 + Retry-After), while tokens that
verified lately keep working and no guess costs a lookup (a server of its own: the limit would refuse
the other modules' new tokens); X-Forwarded-For names the address only from a named proxy."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest

from tests.conftest import unique
from tests.server.conftest import Served, serving
from tests.waiting import scaled, wait_for

PROXY = "127.0.0.1"  # the named proxy of this module's server
STRANGER = "127.0.0.2"  # another loopback address: a peer that is no named proxy


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server of this module's own: the limit it reaches would refuse other modules' new tokens."""
    with serving(tmp_path_factory, ("--forwarded-allow-ips", PROXY)) as it:
        yield it


def _guess(served: Served, n: int, source: str, forwarded_for: str | None = None) -> int:
    """The status of a wrong token sent from the loopback address ``source``."""
    host, port = served.server.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(
        host, int(port), timeout=scaled(30), source_address=(source, 0)
    )
    headers = {"Authorization": f"Bearer shp_u_{n:016x}_{'C' * 43}"}
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    try:
        conn.request("GET", "/v1/jobs", headers=headers)
        response = conn.getresponse()
        json.loads(response.read())
        return response.status
    finally:
        conn.close()


def test_failed_authentication_is_rate_limited_but_known_tokens_keep_working(
    alone: Served,
) -> None:
    served, server = alone, alone.server
    _, known = served.tokens.create_user(unique("known").lower(), "rate")
    _, fresh = served.tokens.create_user(unique("fresh").lower(), "rate")
    assert server.call("GET", "/v1/whoami", token=known)[0] == 200  # verified: in the cache
    guesses = [
        server.call("GET", "/v1/jobs", token=f"shp_u_{i:016x}_{'A' * 43}")[0] for i in range(20)
    ]
    assert guesses == [401] * 20
    status, body, headers = server.call(
        "GET", "/v1/jobs", token="shp_u_" + "f" * 16 + "_" + "B" * 43
    )
    assert status == 429 and body["error"]["type"] == "TooManyFailedAuthentications"
    assert 1 <= int(headers["retry-after"]) <= 60
    assert server.call("GET", "/v1/whoami", token=known)[0] == 200
    assert server.call("GET", "/v1/whoami", token=fresh)[0] == 429  # never verified: not now
    assert server.call("GET", "/healthz")[0] == 200


def test_a_spoofed_forwarded_for_from_a_peer_that_is_no_proxy_does_not_dodge_the_limit(
    alone: Served,
) -> None:
    spoofed = [_guess(alone, i, STRANGER, f"10.0.{i}.1") for i in range(20)]
    assert spoofed == [401] * 20
    assert _guess(alone, 99, STRANGER, "10.0.99.1") == 429  # all counted against 127.0.0.2


def test_the_named_proxy_s_forwarded_for_is_the_address_counted(alone: Served) -> None:
    through = [_guess(alone, i, PROXY, "10.1.1.1") for i in range(20)]
    assert through == [401] * 20
    assert _guess(alone, 99, PROXY, "10.1.1.1") == 429
    assert _guess(alone, 98, PROXY, "10.1.1.2") == 401  # another client behind the same proxy


def test_without_named_proxies_loopback_forwarded_for_is_not_trusted(served: Served) -> None:
    """uvicorn alone trusts X-Forwarded-For from loopback; `server run` trusts no one by default
    (the access log shows the address the server took)."""
    marker = unique("xff").lower()
    status, _, _ = served.server.call(
        "GET", f"/healthz?probe={marker}", headers={"X-Forwarded-For": "10.66.66.66"}
    )
    assert status == 200
    line = wait_for(
        lambda: next((x for x in served.server.log().splitlines() if marker in x), None),
        10,
        what="the access log's line",
    )
    assert "127.0.0.1" in line and "10.66.66.66" not in line
