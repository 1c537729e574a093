"""MetadataServer: registry, lifecycle, port errors, robustness, logging."""

from __future__ import annotations

import socket

import pytest

from spothop.errors import ConfigError
from spothop.providers.local.metadata import (
    METADATA_PROTOCOL_ENV,
    METADATA_URL_ENV,
    PROTOCOLS,
    MetadataHandler,
    MetadataServer,
)
from spothop.providers.local.metadata._http import Request, Response
from tests.providers.local.metadata.conftest import ObservedNotices, Serve, call, instance


def test_registry_and_env_names() -> None:
    assert set(PROTOCOLS) == {"aws", "gcp", "azure", "aliyun", "tencent", "volcengine"}
    assert all(issubclass(h, MetadataHandler) for h in PROTOCOLS.values())
    assert METADATA_URL_ENV == "SPOTHOP_METADATA_URL"
    assert METADATA_PROTOCOL_ENV == "SPOTHOP_METADATA_PROTOCOL"


def test_unknown_protocol_lists_the_known_ones(notices: ObservedNotices) -> None:
    with pytest.raises(ConfigError, match="'ibm'") as info:
        MetadataServer("ibm", instance("ibm"), notices)
    for name in PROTOCOLS:
        assert name in str(info.value)


def test_an_option_the_protocol_does_not_take_is_a_config_error(notices: ObservedNotices) -> None:
    with pytest.raises(ConfigError, match="require_token"):
        MetadataServer("aws", instance("aws"), notices, options={"require_token": True})


def test_port_in_use_names_the_port(notices: ObservedNotices) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = MetadataServer("aws", instance("aws"), notices, port=port)
        with pytest.raises(ConfigError, match=str(port)):
            server.start()


def test_lifecycle(notices: ObservedNotices) -> None:
    server = MetadataServer("tencent", instance("tencent"), notices)
    with pytest.raises(RuntimeError):
        _ = server.url
    server.stop()  # stopping before starting is harmless
    port = server.start()
    assert port > 0
    assert server.start() == port
    assert server.url == f"http://127.0.0.1:{port}"
    assert call(server.url, "/latest/meta-data/instance-id").status == 200
    server.stop()
    server.stop()
    with pytest.raises(OSError):
        call(f"http://127.0.0.1:{port}", "/latest/meta-data/instance-id", timeout=1.0)


def test_context_manager_and_a_port_each(notices: ObservedNotices) -> None:
    with (
        MetadataServer("tencent", instance("tencent", instance_id="ins-a"), notices) as a,
        MetadataServer("tencent", instance("tencent", instance_id="ins-b"), notices) as b,
    ):
        assert a.port != b.port
        assert call(a.url, "/latest/meta-data/instance-id").body == "ins-a"
        assert call(b.url, "/latest/meta-data/instance-id").body == "ins-b"


class _Broken(MetadataHandler):
    def route(self, request: Request) -> Response:
        raise RuntimeError("bug in a handler")


def test_an_exception_in_a_handler_is_a_500_and_the_server_keeps_serving(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(PROTOCOLS, "broken", _Broken)
    server = serve("broken")
    assert call(server.url, "/anything").status == 500
    assert call(server.url, "/anything").status == 500  # still alive
    assert any("bug in a handler" in (r.exc_text or "") for r in caplog.records)


def test_a_bad_content_length_is_400(serve: Serve) -> None:
    server = serve("tencent")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /latest/meta-data/ HTTP/1.0\r\nContent-Length: lots\r\n\r\n")
        head = sock.recv(1024).decode()
    assert head.startswith("HTTP/1.0 400")


@pytest.mark.parametrize(
    ("raw", "status_line"),
    [
        # A method no cloud serves.
        (b"BREW /pot HTTP/1.0\r\n\r\n", "HTTP/1.0 501"),
        # TLS to a plain-HTTP port: answered with an HTTP/0.9-style error page.
        (b"\x16\x03\x01 nonsense\r\n\r\n", ""),
    ],
)
def test_garbage_requests_are_answered_not_crashed(
    serve: Serve, raw: bytes, status_line: str
) -> None:
    server = serve("tencent")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(raw)
        head = sock.recv(1024).decode(errors="replace")
    assert head.startswith(status_line)
    assert head  # something came back
    assert call(server.url, "/latest/meta-data/instance-id").status == 200


def test_request_logging_is_silent_unless_debug(
    serve: Serve, capfd: pytest.CaptureFixture[str]
) -> None:
    quiet = serve("tencent")
    call(quiet.url, "/latest/meta-data/instance-id")
    call(quiet.url, "/latest/meta-data/nope")
    assert capfd.readouterr().err == ""
    loud = serve("tencent", debug=True)
    call(loud.url, "/latest/meta-data/instance-id")
    assert "/latest/meta-data/instance-id" in capfd.readouterr().err
