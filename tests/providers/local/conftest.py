from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.waiting import process_running as pid_alive  # noqa: F401 - re-exported: tests import them from here
from tests.waiting import wait_for  # noqa: F401


@pytest.fixture(autouse=True)
def _shared_disk_until_migrated(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' instances read and write the test's folders (pid files in their cwd, a test's
    tmp files): they run unisolated unless their world says otherwise. test_isolation.py's
    worlds say ``isolation: required``."""
    if "SPOTHOP_LOCAL_ISOLATION" not in os.environ:
        monkeypatch.setenv("SPOTHOP_LOCAL_ISOLATION", "off")


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
