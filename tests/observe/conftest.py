"""Worlds for the ledger's tests: the e2e harness's two clouds, with constant or moving spot prices.

Constant prices (``price_std_ratio: 0``) make the cloud's bill a function of
instance lifetimes and one price each, so a test can compute it on its own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from spothop.jobs.controller import daemon
from spothop.providers.base import InstanceState
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.jobs.e2e.conftest import WORLD, Harness
from tests.waiting import process_running, wait_for


def flat_world() -> dict:
    world = copy.deepcopy(WORLD)
    for cloud in world["clouds"]:
        cloud["market"]["synthetic"]["price_std_ratio"] = 0.0
    return world


MOVING_SPEED = 50.0  # a synthetic price steps every 300 simulated s: every 6 wall s here
MOVING_STD_RATIO = 0.3


def moving_world() -> dict:
    """The harness's world with spot prices that move (a step every 300 simulated s)."""
    world = copy.deepcopy(WORLD)
    world["speed"] = MOVING_SPEED
    for cloud in world["clouds"]:
        cloud["market"]["synthetic"]["price_std_ratio"] = MOVING_STD_RATIO
    return world


@pytest.fixture
def flat_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    yield from _harness(tmp_path, monkeypatch, flat_world())


@pytest.fixture
def moving_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    yield from _harness(tmp_path, monkeypatch, moving_world())


def _harness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_data: dict
) -> Iterator[Harness]:
    world_path = tmp_path / "world.yaml"
    world_path.write_text(yaml.safe_dump(world_data))
    monkeypatch.setenv("SPOTHOP_WORLD", str(world_path))
    world = load_world(world_path)
    h = Harness(
        tmp_path,
        world_path,
        f"sqlite:///{tmp_path / 'store.db'}",
        {n: LocalProvider(n, world=world, world_path=world_path) for n in world.cloud_names},
    )
    try:
        yield h
    finally:
        stopped = daemon.stop()
        for provider in h.providers.values():
            for instance in provider.list_instances():
                provider.terminate(instance.instance_id)
        for provider in h.providers.values():
            for instance in provider.list_instances():
                provider.wait(
                    instance.instance_id,
                    [InstanceState.TERMINATED, InstanceState.PREEMPTED, InstanceState.FAILED],
                    20,
                )
        if stopped is not None and stopped.pid:
            wait_for(lambda: not process_running(stopped.pid), 20, what="the controller's exit")
