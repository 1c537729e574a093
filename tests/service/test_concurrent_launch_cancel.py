"""Launches of one file and cancels, raced against each other and against the controller (the fake
provider, a virtual clock, a store on disk opened by each caller as a CLI process opens it): one
job per launch, at most one live instance per attempt, a cancel that races a launch ends the job
cancelled with no instance left alive, and two cancels end it once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller.loop import Controller
from spothop.jobs.errors import JobFinished
from spothop.jobs.lifecycle import JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.providers.base import Instance, LaunchRequest
from spothop.service.jobs import request_cancel
from spothop.service.launch import launch_job
from spothop.testing import FakeProvider
from tests.fake_world import fake_store_world
from tests.waiting import wait_for

JOB_FILE = "name: raced\nrun: sleep 600\nmarket: spot\n"
CALLERS = 8
MAX_PASSES = 30


class GatedProvider(FakeProvider):
    """The fake cloud, whose launches wait at a gate once it is closed (a launch in flight)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def launch(self, request: LaunchRequest) -> Instance:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().launch(request)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    url, store, clock, provider = fake_store_world(tmp_path, GatedProvider)
    controller = Controller(store, {provider.name: provider}, store_url=url, home=tmp_path)
    job_file = tmp_path / "raced.yaml"
    job_file.write_text(JOB_FILE)
    try:
        yield {
            "url": url,
            "store": store,
            "clock": clock,
            "provider": provider,
            "controller": controller,
            "file": job_file,
        }
    finally:
        provider.gate.set()
        controller.close()
        store.close()


def as_a_caller(url: str, act: Callable[[JobStore], Any]) -> Any:
    """``act`` on the store opened afresh, as each `spothop` process opens it."""
    with JobStore(url) as store:
        return act(store)


def settle(world: dict[str, Any]) -> None:
    """One controller pass, its launches carried out."""
    controller: Controller = world["controller"]
    controller.run_pass()
    wait_for(lambda: not controller.executor.launching(), 30, what="the pass's launches to end")
    world["clock"].advance(5)


def live(provider: FakeProvider) -> list[Instance]:
    return [i for i in provider.list_instances() if i.state.is_alive]


def until_final(world: dict[str, Any], job_id: str) -> JobState:
    for _ in range(MAX_PASSES):
        state = world["store"].get_job(job_id).state
        if state.final:
            return JobState(state)
        settle(world)
    raise AssertionError(f"job {job_id} is still {world['store'].get_job(job_id).state}")


def test_concurrent_launches_of_one_file_are_one_job_each_with_one_instance_per_attempt(
    world: dict[str, Any],
) -> None:
    def launch(store: JobStore) -> str:
        return launch_job(store, load_job(world["file"])).job_id

    barrier = threading.Barrier(CALLERS)

    def caller(_: int) -> str:
        barrier.wait(30)
        return str(as_a_caller(world["url"], launch))

    with ThreadPoolExecutor(CALLERS) as pool:
        job_ids = list(pool.map(caller, range(CALLERS)))
    assert len(set(job_ids)) == CALLERS
    store: JobStore = world["store"]
    assert {store.get_job(j).state for j in job_ids} == {JobState.PENDING}
    for _ in range(3):
        settle(world)
    provider: FakeProvider = world["provider"]
    attempts = [a for j in job_ids for a in store.attempts(j)]
    assert {a.job_id for a in attempts} == set(job_ids)
    assert all(len(store.attempts(j)) == 1 for j in job_ids), "one attempt per job"
    instance_ids = [a.instance_id for a in attempts]
    assert None not in instance_ids and len(set(instance_ids)) == CALLERS
    assert sorted(i.instance_id for i in live(provider)) == sorted(instance_ids)
    assert len(provider.requests) == CALLERS  # no launch asked twice


@pytest.mark.parametrize("moment", ["before-the-pass", "while-launching", "once-running"])
def test_a_cancel_racing_a_launch_ends_the_job_cancelled_with_no_instance_alive(
    moment: str, world: dict[str, Any]
) -> None:
    store: JobStore = world["store"]
    provider: GatedProvider = world["provider"]
    job_id = launch_job(store, load_job(world["file"])).job_id

    def cancel() -> None:
        as_a_caller(world["url"], lambda s: request_cancel(s, job_id))

    if moment == "before-the-pass":
        cancel()
        settle(world)
    elif moment == "while-launching":
        provider.gate.clear()
        world["controller"].run_pass()
        assert provider.entered.wait(30), "the launch never reached the cloud"
        cancel()  # the cloud call is in flight
        provider.gate.set()
        wait_for(lambda: not world["controller"].executor.launching(), 30, what="the launch")
    else:
        settle(world)
        assert live(provider), "the job has an instance before the cancel"
        cancel()
    assert until_final(world, job_id) is JobState.CANCELLED
    settle(world)  # and a later pass launches nothing for it
    assert live(provider) == []
    assert store.get_job(job_id).state is JobState.CANCELLED
    # cancelled before the pass: never launched; else launched once and terminated
    assert len(provider.requests) == (0 if moment == "before-the-pass" else 1)
    kinds = [e.kind for e in store.events(job_id)]
    assert kinds.count("job_cancelled") == 1


def test_two_concurrent_cancels_end_the_job_once(world: dict[str, Any]) -> None:
    store: JobStore = world["store"]
    provider: FakeProvider = world["provider"]
    job_id = launch_job(store, load_job(world["file"])).job_id
    settle(world)
    assert live(provider)
    barrier = threading.Barrier(2)

    def caller(_: int) -> dict[str, Any]:
        barrier.wait(30)
        return dict(as_a_caller(world["url"], lambda s: request_cancel(s, job_id)).to_dict())

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(caller, range(2)))
    assert answers == [{"job_id": job_id, "cancel_requested": True}] * 2
    assert until_final(world, job_id) is JobState.CANCELLED
    settle(world)
    assert live(provider) == []
    kinds = [e.kind for e in store.events(job_id)]
    assert kinds.count("cancel_requested") == 2  # both asked, each recorded
    assert kinds.count("job_cancelled") == 1  # the job ended once
    assert kinds.count("attempt_ended") == 1  # its one instance terminated once
    # a third, after the job ended, says so and changes nothing
    with pytest.raises(JobFinished, match="already cancelled"):
        request_cancel(store, job_id)
    assert store.get_job(job_id).state is JobState.CANCELLED
