"""A controller whose store stops taking writes mid-pass (its disk full or read-only) leaves no
job stuck and no billed instance unknown: passes fail in one line each and are retried; nothing
is launched while the store cannot record it; once the store takes writes again, the job goes on
from where the cloud is (a preempted node relaunched once, a launched instance adopted).

The fake provider on a virtual clock; the store is real SQLite, made to refuse every write
(``PRAGMA query_only``: SQLite's own read-only answer) from a chosen moment.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from spothop.jobs.controller.loop import Controller, Loop
from spothop.jobs.lifecycle import AttemptState, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.providers.base import Instance, LaunchRequest
from spothop.testing import FakeProvider
from tests.fake_world import fake_store_world
from tests.waiting import wait_for


class Disk:
    """The store's disk: while ``full`` every transaction is refused (the controller's all begin
    ``BEGIN IMMEDIATE``), as SQLite refuses them on a disk that cannot take a write."""

    def __init__(self, store: JobStore) -> None:
        self.full = threading.Event()

        @event.listens_for(store.engine, "checkout")  # each use of a connection, before its BEGIN
        def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
            dbapi_connection.execute(f"PRAGMA query_only={1 if self.full.is_set() else 0}")


class FillsTheDisk(FakeProvider):
    """The fake cloud; with ``fill_on_launch`` set, the store's disk fills the moment a launch
    returns (before the controller records its instance)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fill_on_launch: Disk | None = None

    def launch(self, request: LaunchRequest) -> Instance:
        instance = super().launch(request)
        if self.fill_on_launch is not None:
            self.fill_on_launch.full.set()
        return instance


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    url, store, clock, provider = fake_store_world(tmp_path, FillsTheDisk)
    controller = Controller(store, {provider.name: provider}, store_url=url, home=tmp_path)
    loop = Loop(controller.run_pass)
    try:
        yield {
            "store": store,
            "disk": Disk(store),
            "clock": clock,
            "provider": provider,
            "controller": controller,
            "loop": loop,
        }
    finally:
        controller.close()
        store.close()


def settle(world: dict[str, Any]) -> None:
    """One pass as the daemon's loop runs it (a pass that raises is counted, not fatal), its
    launches carried out, then 5 s of the cloud's clock."""
    world["loop"].run_once()
    wait_for(lambda: not world["controller"].executor.launching(), 30, what="the launches")
    world["clock"].advance(5)


def live(provider: FakeProvider) -> list[Instance]:
    return [i for i in provider.list_instances() if i.state.is_alive]


def running(world: dict[str, Any], job_id: str) -> bool:
    return bool(world["store"].get_job(job_id).state is JobState.RUNNING)


def test_a_store_that_refuses_writes_mid_job_launches_nothing_and_the_job_goes_on_after(
    world: dict[str, Any],
) -> None:
    store, provider, disk, loop = world["store"], world["provider"], world["disk"], world["loop"]
    job_id = store.create_job(load_job({"name": "f", "run": "sleep 1e6"}))
    for _ in range(10):
        settle(world)
    assert running(world, job_id)
    [first] = live(provider)
    disk.full.set()
    provider.preempt(first.instance_id, lead_time_s=10)
    failed_before = loop.stats.failed_passes
    for _ in range(6):  # the cloud takes the instance back while nothing can be recorded
        settle(world)
    assert loop.stats.failed_passes > failed_before
    error = loop.stats.last_error or ""
    assert "store.db" in error and "cannot be written" in error and "\n" not in error
    assert len(provider.requests) == 1  # no launch the store could not record
    disk.full.clear()
    assert store.get_job(job_id).state is JobState.RUNNING  # as last recorded: nothing lost
    for _ in range(10):
        settle(world)
    assert running(world, job_id)
    assert len(provider.requests) == 2  # the preempted node relaunched once
    [second] = live(provider)
    attempts = store.attempts(job_id)
    assert [a.instance_id for a in attempts] == [first.instance_id, second.instance_id]
    assert attempts[0].state is AttemptState.ENDED and attempts[1].live


def test_an_instance_launched_just_before_the_store_refused_writes_is_adopted_after(
    world: dict[str, Any],
) -> None:
    store, provider, disk = world["store"], world["provider"], world["disk"]
    provider.fill_on_launch = disk
    job_id = store.create_job(load_job({"name": "f", "run": "sleep 1e6"}))
    settle(world)  # the attempt written, the cloud called, then the disk full
    provider.fill_on_launch = None
    for _ in range(4):
        settle(world)
    disk.full.clear()
    [attempt] = store.attempts(job_id)
    assert attempt.instance_id is None  # the launch returned, its instance never recorded
    for _ in range(10):
        settle(world)
    assert running(world, job_id)
    [instance] = live(provider)
    assert len(provider.requests) == 1  # adopted by its launch token, not launched again
    [attempt] = store.attempts(job_id)
    assert attempt.instance_id == instance.instance_id and attempt.live
