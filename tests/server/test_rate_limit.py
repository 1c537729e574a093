"""Failed authentication is rate-limited per client address (429 + Retry-After), while tokens that
verified lately keep working and no guess costs a lookup (a server of its own: the limit would refuse
the other modules' new tokens)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import unique
from tests.server.conftest import Served, serving


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server of this module's own: the limit it reaches would refuse other modules' new tokens."""
    with serving(tmp_path_factory) as it:
        yield it


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
