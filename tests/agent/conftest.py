from __future__ import annotations

from collections.abc import Iterator

import pytest

from spothop.providers.local.metadata import InstanceMetadata, MetadataServer, NoticeState


class Clock:
    """A clock the test sets; the endpoint and the watcher share it."""

    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def endpoint(clock: Clock) -> Iterator[object]:
    """``endpoint(protocol, **options)`` → a started MetadataServer on the shared clock (stopped afterwards)."""
    servers: list[MetadataServer] = []

    def start(protocol: str, **options: object) -> MetadataServer:
        metadata = InstanceMetadata(
            instance_id="i-0abc",
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            provider=f"{protocol}-sim",
            launch_time=clock.t,
        )
        server = MetadataServer(
            protocol, metadata, NoticeState(clock=clock), options=options or None
        )
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
