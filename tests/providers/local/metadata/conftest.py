"""Fixtures for the metadata conformance suite: a manual clock, started servers, a raw HTTP client."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from spothop.providers.local.metadata import InstanceMetadata, MetadataServer, NoticeState

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
HTTP_TIMEOUT_S = 5.0  # generous; every request here answers in milliseconds unless it long-polls


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ObservedNotices(NoticeState):
    """A NoticeState that says when a long-poll has started waiting on it."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.waiting = threading.Event()

    def wait_for_change(self, version: int, timeout_s: float) -> int:
        self.waiting.set()
        return super().wait_for_change(version, timeout_s)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # lower-cased names
    body: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def call(
    url: str,
    path: str,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = HTTP_TIMEOUT_S,
) -> Reply:
    """One real HTTP request; never raises on a 4xx/5xx status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        data = resp.read().decode()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def instance(provider: str, spot: bool = True, **overrides: Any) -> InstanceMetadata:
    fields: dict[str, Any] = {
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "p4d.24xlarge",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "provider": provider,
        "launch_time": T0 - 3600,
        "spot": spot,
    }
    fields.update(overrides)
    return InstanceMetadata(**fields)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def notices(clock: ManualClock) -> ObservedNotices:
    return ObservedNotices(clock)


Serve = Callable[..., MetadataServer]


@pytest.fixture
def serve(notices: ObservedNotices) -> Iterator[Serve]:
    """``serve(protocol, spot=True, metadata=None, **server_kwargs)``: a started server, stopped after."""
    started: list[MetadataServer] = []

    def _serve(
        protocol: str,
        spot: bool = True,
        metadata: InstanceMetadata | None = None,
        **kwargs: Any,
    ) -> MetadataServer:
        server = MetadataServer(protocol, metadata or instance(protocol, spot), notices, **kwargs)
        server.start()
        started.append(server)
        return server

    yield _serve
    for server in started:
        server.stop()
