from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.waiting import wait_for  # noqa: F401 - re-exported: tests import it from here


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def world_file(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a world file; returns its path."""

    def write(text: str, name: str = "world.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write


@pytest.fixture
def providers() -> Iterator[list[LocalProvider]]:
    """Providers made by a test; every instance they launched is terminated afterwards."""
    made: list[LocalProvider] = []
    yield made
    for provider in made:
        for instance in provider.list_instances():
            provider.terminate(instance.instance_id)
    for provider in made:
        for instance in provider.list_instances():
            provider.wait(instance.instance_id, [], 0)


@pytest.fixture
def aws(providers: list[LocalProvider]) -> LocalProvider:
    provider = LocalProvider("aws-sim", world=load_world())
    providers.append(provider)
    return provider
