"""A controller killed at each step of a launch: the next controller over the same store finds
the job progressing, never launched twice, never stuck.

The steps (:data:`spothop.jobs.controller.faults.LAUNCH_STEPS`): the attempt written, the
request built (the agent's token issued), the cloud called, the agent's token bound, the
instance recorded, the attempt running; and before them all, the job stored with no controller
pass yet. At each, the controller stops where it stands, as SIGKILL stops it: nothing after the
step runs, in its pass or its launch thread. A fresh controller then runs over the same store
and cloud. Each case ends with the job running on exactly one instance, the one the cloud was
asked for (relaunched once when the first controller died before the cloud call, adopted by its
launch token after it), every other attempt ended, and one live agent token, bound to that
instance.

The fake provider on a virtual clock, in server mode (agent tokens; its instances run nothing,
so the control plane's URL is never called).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.controller import faults
from spothop.jobs.controller.loop import Controller
from spothop.jobs.controller.snapshot import LAUNCH_CUT
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.state.tokens import TokenStore
from spothop.testing import FakeProvider
from tests.fake_world import fake_store_world
from tests.waiting import wait_for

CONTROL_PLANE = "http://10.0.0.1:8080"  # never called: the fake cloud's instances run nothing
PASSES = 12
BEFORE_THE_CLOUD_CALL = ("attempt_written", "request_built")


class Killed(BaseException):
    """The controller's end at a step: no ``except Exception`` of it runs after (as none runs
    after SIGKILL)."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    url, store, clock, provider = fake_store_world(tmp_path, FakeProvider)
    try:
        yield {"url": url, "store": store, "clock": clock, "provider": provider, "home": tmp_path}
    finally:
        faults.set_hook(None)
        store.close()


def controller(world: dict[str, Any], control_plane_url: str = CONTROL_PLANE) -> Controller:
    return Controller(
        world["store"],
        {world["provider"].name: world["provider"]},
        store_url=world["url"],
        home=world["home"],
        control_plane_url=control_plane_url,
        token_grace_s=0.0,
    )


def settle(world: dict[str, Any], c: Controller) -> None:
    """One pass and its launches, then 5 s of the cloud's clock; a kill ends it where it is."""
    with contextlib.suppress(Killed):
        c.run_pass()
    wait_for(lambda: not c.executor.launching(), 30, what="the pass's launches to end")
    world["clock"].advance(5)


def kill_at(step: str) -> list[str]:
    """Stop the controller the first time it reaches ``step``; the steps it reached, in order."""
    reached: list[str] = []

    def hook(at: str) -> None:
        reached.append(at)
        if at == step:
            faults.set_hook(None)  # the next controller runs to the end
            raise Killed(step)

    faults.set_hook(hook)
    return reached


@pytest.mark.parametrize("step", ["job_stored", *faults.LAUNCH_STEPS])
def test_a_controller_killed_at_each_step_of_a_launch_leaves_the_job_running_on_one_instance(
    world: dict[str, Any], step: str
) -> None:
    store: JobStore = world["store"]
    provider: FakeProvider = world["provider"]
    job_id = store.create_job(load_job({"name": "k", "run": "sleep 1e6"}))
    if step != "job_stored":  # job_stored: killed before its first pass; no step reached
        reached = kill_at(step)
        first = controller(world)
        for _ in range(PASSES):
            settle(world, first)
            if step in reached:
                break
        first.close()
        assert reached == list(faults.LAUNCH_STEPS[: faults.LAUNCH_STEPS.index(step) + 1])
    second = controller(world)
    try:
        for _ in range(PASSES):
            settle(world, second)
    finally:
        second.close()

    job = store.get_job(job_id)
    assert job.state is JobState.RUNNING, job.reason
    assert len(provider.requests) == 1  # the cloud asked once: no instance launched twice
    [instance] = [i for i in provider.list_instances() if i.state.is_alive]
    attempts = store.attempts(job_id)
    [alive] = [a for a in attempts if a.live]
    assert alive.instance_id == instance.instance_id and alive.state is AttemptState.RUNNING
    cut = [a for a in attempts if not a.live]
    if step in BEFORE_THE_CLOUD_CALL:  # cut short with nothing launched: relaunched once
        [gone] = cut
        assert gone.end_reason is EndReason.LAUNCH_FAILED and gone.error_code == LAUNCH_CUT
    else:  # adopted, or never cut
        assert cut == []
    assert TokenStore(store.engine).live_agent_tokens([job_id]) == [(job_id, instance.instance_id)]


def test_a_controller_process_sigkilled_after_the_cloud_call_leaves_one_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one real-process case: the daemon SIGKILLed (``SPOTHOP_TEST_KILL_AT``) the moment the
    local cloud's launch call returned, its instance booting and its id stored nowhere; the next
    daemon adopts it by its token (and binds its agent's token to it) and the job succeeds on
    it, no instance launched twice.

    The worker waits at a gate until the new daemon has bound the agent's token, so that the
    adoption's bind is what this case checks (a worker that ends before it is
    :func:`test_an_agent_whose_controller_died_before_binding_its_token_reports_its_exit`)."""
    from spothop.jobs.controller import daemon
    from tests.jobs.e2e.conftest import WORLD, running_harness
    from tests.jobs.e2e.test_controller_restart import check_instances, gated

    # The first daemon's one launch must be in flight alone until the kill: a launch runs on
    # its own thread while the daemon's passes go on, and a pass in that window may adopt the
    # booting instance by its token before the launch call returns (the executor allows it),
    # which stores its id and is not the case this test is about. A pass needs a wake, so none
    # comes: the job is stored before the daemon starts (its first pass launches it; a
    # `spothop launch` would poke it, and under load that poke's pass came while the first
    # pass's launch was in the cloud's call, 1 run in 6), the daemon passes only when woken (a
    # long period), and its instance boots 15 s of wall time after its launch (75 s of the
    # cloud's), so no agent's first event wakes it before the call returns and the kill.
    world = {
        **WORLD,
        "clouds": [{**cloud, "launch_delay_s": 75} for cloud in WORLD["clouds"]],
    }
    with running_harness(tmp_path, monkeypatch, world) as h:
        gate = tmp_path / "gate"
        with h.store() as store:
            job_id = store.create_job(load_job({"name": "killed", "run": gated(gate, "echo done")}))
        monkeypatch.setenv(faults.KILL_AT_ENV, "provider_called")
        daemon.start_background(store_url=h.store_url, extra_args=("--period", "3600"))
        wait_for(lambda: daemon.status() is None, 120, what="the controller killed mid-launch")
        monkeypatch.delenv(faults.KILL_AT_ENV)
        [booting] = h.instances()
        with h.store() as store:
            [attempt] = store.attempts(job_id)
        assert attempt.instance_id is None  # killed before it was recorded
        h.start_controller()

        def bound() -> bool:
            with h.store() as store:
                tokens = TokenStore(store.engine).live_agent_tokens([job_id])
            return tokens == [(job_id, booting.instance_id)]

        wait_for(bound, 60, what="the adopted instance's agent token bound to it")
        gate.touch()
        job = h.wait_final(job_id, 180, what="the job to end")
        assert job.state is JobState.SUCCEEDED, job.reason
        assert [i.instance_id for i in h.instances()] == [booting.instance_id]  # adopted
        # The job ends on the worker's exit; its instance is stopped after that, in a later step.
        wait_for(lambda: not h.alive(), 60, what="the job's instance ended")
        check_instances(h, job_id)


def test_an_agent_whose_controller_died_before_binding_its_token_reports_its_exit(
    world: dict[str, Any], tmp_path: Path
) -> None:
    """The controller killed between the cloud's launch call and the token's bind: the instance
    holds a token that names its launch, not itself. Its agent registers, beats, and its worker
    exits 0 before any controller runs again: the agent API binds the token to the instance on
    its first use, so every call is taken and the exit stored. The next controller adopts the
    instance, binds the token (the same id: nothing changes), reads the exit, and the job
    succeeds on that one instance, the cloud asked once."""
    from spothop.controlplane import Heartbeat, HttpControlPlane, Registration
    from spothop.jobs.launcher import AGENT_TOKEN_ENV
    from spothop.server.agent_serve import serve_agent_api
    from spothop.wire.events import Exited, WorkerExited, WorkerStarted

    store: JobStore = world["store"]
    provider: FakeProvider = world["provider"]
    tokens = TokenStore(store.engine)
    api = serve_agent_api(None, world["url"], f"sqlite:///{tmp_path / 'queue.db'}")
    try:
        job_id = store.create_job(load_job({"name": "k", "run": "sleep 1e6"}))
        reached = kill_at("provider_called")
        first = controller(world, api.url)
        for _ in range(PASSES):
            settle(world, first)
            if reached[-1:] == ["provider_called"]:
                break
        first.close()
        [request] = provider.requests
        [instance] = [i for i in provider.list_instances() if i.state.is_alive]
        [attempt] = store.attempts(job_id)
        assert attempt.instance_id is None  # killed before it was recorded
        assert tokens.live_agent_tokens([job_id]) == [(job_id, attempt.launch_token)]  # unbound

        iid = instance.instance_id
        plane = HttpControlPlane(
            api.url, iid, token=request.env[AGENT_TOKEN_ENV], spool_dir=tmp_path / "spool"
        )
        plane.register(Registration(instance_id=iid, provider=provider.name, worker_id="w-1"))
        plane.heartbeat(Heartbeat(iid, "w-1", 1_800_000_010.0, "running", 7, 0, None, False))
        plane.record(WorkerStarted(instance_id=iid, job_id=job_id, worker_id="w-1", pid=7))
        plane.record(WorkerExited(instance_id=iid, job_id=job_id, worker_id="w-1", code=0))
        plane.record(Exited(instance_id=iid, job_id=job_id, code=0))
        assert plane.flush(10) == 0  # every event taken: none waits in the spool
        assert tokens.live_agent_tokens([job_id]) == [(job_id, iid)]  # bound on first use

        second = controller(world, api.url)
        try:
            for _ in range(PASSES):
                settle(world, second)
                if store.get_job(job_id).state.final:
                    break
        finally:
            second.close()
    finally:
        api.shutdown()
    job = store.get_job(job_id)
    assert job.state is JobState.SUCCEEDED, job.reason
    assert len(provider.requests) == 1  # one instance billed: the one the cloud launched
    [adopted] = store.attempts(job_id)
    assert adopted.instance_id == iid and adopted.exit_code == 0
