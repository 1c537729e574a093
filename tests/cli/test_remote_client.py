"""The CLI's server switch without a server: what it says when the URL is wrong or nobody answers."""

from __future__ import annotations

import socket

import pytest

from spothop.cli.remote import (
    RETRY_BACKOFF_S,
    RETRY_MAX_S,
    SERVER_ENV,
    TOKEN_ENV,
    ServerClient,
    _retry_delay_s,
    connect,
)
from spothop.errors import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, ServerUnavailable

SECRET = "shp_u_deadbeef_not-a-real-secret-but-never-printed"


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs",),
        ("status", "j-000000"),
        ("logs", "j-000000"),
        ("cancel", "j-000000"),
        ("report", "j-000000"),
        ("report", "--since", "1d"),
        ("events", "--job", "j-000000"),
        ("offers", "--gpu", "H100"),
    ],
)
def test_an_unreachable_server_is_named_with_exit_4(cli, monkeypatch, argv) -> None:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv(SERVER_ENV, url)
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    result = cli(*argv)
    assert result.code == EXIT_UNAVAILABLE, result.err
    assert url in result.err and "did not answer" in result.err
    assert "Traceback" not in result.err and SECRET not in result.err + result.out


def test_the_server_flag_wins_over_the_environment(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(SERVER_ENV, "http://127.0.0.1:1")
    url = f"http://127.0.0.1:{_closed_port()}"
    result = cli("jobs", "--server", url, "--token", SECRET)
    assert result.code == EXIT_UNAVAILABLE and url in result.err


def test_a_server_url_that_is_not_one_says_how_to_fix_it(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(SERVER_ENV, "localhost:8350")
    result = cli("jobs", "--json")
    assert result.code == EXIT_BAD_INPUT
    assert "http(s)://HOST:PORT" in result.err and "Traceback" not in result.err


def test_an_empty_server_means_the_embedded_store(cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(SERVER_ENV, "")
    result = cli("jobs", "--json")
    assert result.code == 0, result.err
    assert result.json() == []


def test_the_token_is_not_in_the_clients_repr() -> None:
    client = connect("http://127.0.0.1:8350", SECRET)
    assert isinstance(client, ServerClient)
    assert SECRET not in repr(client) and "***" in repr(client)


def test_a_retry_waits_the_servers_retry_after_else_a_jittered_backoff() -> None:
    told = ServerUnavailable("busy")
    told.retry_after_s = 2.0
    assert _retry_delay_s(0, told) == 2.0
    told.retry_after_s = 60.0
    assert _retry_delay_s(0, told) == RETRY_MAX_S
    silent = ServerUnavailable("down")
    for attempt in range(6):
        waits = {_retry_delay_s(attempt, silent) for _ in range(200)}
        bound = min(RETRY_MAX_S, RETRY_BACKOFF_S * 2**attempt)
        assert all(0 <= w <= bound for w in waits) and len(waits) > 100  # drawn, not fixed
