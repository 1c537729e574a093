"""The e2e harness: a fast local world, the real controller daemon, real instances, injected preemptions.

Every test here runs real processes: ``spothop launch`` (in this process,
through the CLI's ``main``) stores the job and starts the controller daemon
(``python -m spothop.cli.main controller run``) in the background; the
controller launches local-cloud instances whose host runs the agent, which
runs the job's worker. Preemptions are injected with ``LocalProvider.preempt``.

The world runs at ``speed`` 5 (simulated seconds per wall second) with calm
markets (no preemption of their own), so every interruption is one a test
injected; each cloud sells 2 types in 2 zones, so the 30-minute cooldowns of
a handful of preemptions still leave spot markets to move to.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from spothop.cli.main import main
from spothop.jobs.controller import daemon
from spothop.jobs.launcher import INSTANCE_STATE_ROOT
from spothop.jobs.records import JobRecord
from spothop.jobs.store import JobStore
from spothop.providers.base import Instance, InstanceState
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.waiting import process_running, wait_for

SPEED = 5.0
CALM = {
    "synthetic": {
        "mean_time_between_preemptions_s": 300_000_000,
        "mean_outage_s": 60,
        "capacity": 100,
    }
}
WORLD = {
    "seed": 11,
    "speed": SPEED,
    "clouds": [
        {
            "name": "aws-sim",
            "protocol": "aws",
            "catalog": "aws",
            "notice_lead_time_s": 60,
            "advance_notice_s": 60,
            "launch_delay_s": 1,
            "terminate_grace_s": 2,
            "locations": ["us-east-1a", "us-east-1b"],
            "instance_types": ["g5.xlarge", "g4dn.xlarge"],
            "market": CALM,
        },
        {
            "name": "gcp-sim",
            "protocol": "gcp",
            "catalog": "gcp",
            "notice_lead_time_s": 30,
            "launch_delay_s": 1,
            "terminate_grace_s": 2,
            "locations": ["us-central1-a", "us-central1-b"],
            "instance_types": ["g2-standard-4", "n1-standard-4+1xnvidia-tesla-t4"],
            "market": CALM,
        },
    ],
}
# A terminated instance's agent gets 6 s of wall time (30 simulated) to hand its last events to
# the control plane before the local cloud kills it: a worker released the moment its agent
# booted (the job drained meanwhile), or one in its emergency protocol when the job ended, would
# otherwise die with its last events unsent, which no controller could get back (a real VM's
# shutdown gives its agent longer). For the tests that check every event reached the store.
SLOW_TERMINATE = {
    **WORLD,
    "clouds": [{**cloud, "terminate_grace_s": 30} for cloud in WORLD["clouds"]],
}
PERIOD_S = 2.0  # the controller's slow pass; notices wake it at once
HERE = Path(__file__).parent


@dataclass
class Harness:
    tmp: Path
    world_path: Path
    store_url: str
    providers: dict[str, LocalProvider] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    def set_world(self, world: dict[str, Any]) -> None:
        """Another world (before the first launch: the controller reads it when it starts). The
        test's folder is the world's bucket: the job's checkpoints, inputs and outputs live there."""
        self.world_path.write_text(yaml.safe_dump(bucketed(world, self.tmp)))
        loaded = load_world(self.world_path)
        self.providers = {
            n: LocalProvider(n, world=loaded, world_path=self.world_path)
            for n in loaded.cloud_names
        }

    # -- the CLI, in this process ----------------------------------------------------

    def cli(self, *args: str) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(list(args))
        return code, out.getvalue()

    def launch(self, spec: dict[str, Any], name: str = "job.yaml") -> str:
        path = self.tmp / name
        path.write_text(yaml.safe_dump(spec))
        code, out = self.cli("launch", str(path), "--detach", "--json", *self.launch_args())
        assert code == 0, out
        return str(json.loads(out)["job_id"])

    def launch_args(self) -> tuple[str, ...]:
        return ("--store", self.store_url, *self.extra_args)

    def status(self, job_id: str) -> dict[str, Any]:
        code, out = self.cli("status", job_id, "--json", "--store", self.store_url)
        assert code == 0, out
        return dict(json.loads(out))

    def store(self) -> JobStore:
        return JobStore(self.store_url)

    # -- the controller --------------------------------------------------------------

    def start_controller(self) -> daemon.ControllerInfo:
        return daemon.start_background(
            store_url=self.store_url, extra_args=("--period", str(PERIOD_S), *self.extra_args)
        )

    def kill_controller(self) -> int:
        info = daemon.status()
        assert info is not None and info.pid
        os.kill(info.pid, signal.SIGKILL)
        wait_for(lambda: daemon.status() is None, 20, what="the killed controller's lock to free")
        return info.pid

    # -- the cloud -------------------------------------------------------------------

    def instances(self) -> list[Instance]:
        return [i for p in self.providers.values() for i in p.list_instances()]

    def alive(self, job_id: str | None = None) -> list[Instance]:
        return [
            i
            for i in self.instances()
            if i.state.is_alive and (job_id is None or i.tags.get("spothop-job") == job_id)
        ]

    def agent_dir(self, instance: Instance) -> Path:
        """The agent's state folder on ``instance``'s own disk (its events, its control files):
        the test looks into the instance as an operator on it would; nothing of it is on the
        controller's disk."""
        row = self.providers[instance.provider].store.instance(instance.instance_id)
        assert row is not None, instance
        state = Path(INSTANCE_STATE_ROOT.lstrip("/")) / instance.tags["spothop-attempt"]
        return Path(row["directory"]) / "root" / state

    def agent_dirs(self, job_id: str) -> list[Path]:
        """:meth:`agent_dir` of every instance the job has had."""
        return [self.agent_dir(i) for i in self.instances() if i.tags.get("spothop-job") == job_id]

    def running(self, job_id: str) -> list[Instance]:
        return [i for i in self.alive(job_id) if i.state is InstanceState.RUNNING]

    @property
    def queue_url(self) -> str:
        return self.extra_args[self.extra_args.index("--queue-url") + 1]

    def preempt(
        self, instance: Instance, lead_time_s: float = 60.0, advance_s: float | None = None
    ) -> None:
        """A final notice now, the reclaim ``lead_time_s`` simulated seconds later; with
        ``advance_s``, the cloud's advance signal now and the final notice that much later."""
        self.providers[instance.provider].preempt(
            instance.instance_id, lead_time_s=lead_time_s, advance_s=advance_s
        )

    def wait_state(
        self, job_id: str, states: set[str], timeout_s: float, what: str
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            # The store's one read until the state is there, then the CLI's status once (each
            # `status` builds every cloud's provider and market: polled five times a second, it
            # was most of a test process's CPU, taken from the processes under test).
            with self.store() as store:
                if store.get_job(job_id).state.value not in states:
                    return None
            data = self.status(job_id)
            return data if data["state"] in states else None

        return wait_for(reached, timeout_s, what=what, interval_s=0.2)

    def wait_final(self, job_id: str, timeout_s: float, what: str) -> JobRecord:
        """The job's record once it is final, read from the store (no CLI, no controller needed)."""

        def ended() -> JobRecord | None:
            with self.store() as store:
                job = store.get_job(job_id)
            return job if job.state.final else None

        return wait_for(ended, timeout_s, what=what, interval_s=0.2)


def script_job(script: Path | str, *args: object) -> dict[str, str]:
    """The ``workdir`` and ``run`` of a job that runs ``script`` with ``args``: its folder is
    packed and uploaded at launch, and the instance runs it from there with its own
    ``python`` (an instance sees nothing of this machine's disk but the world's buckets)."""
    path = Path(script)
    return {"workdir": str(path.parent), "run": shlex.join(["python", path.name, *map(str, args)])}


def controller_file(name: str) -> Path:
    """A file of the controller's own (its store, its queue): in its home, never in the test's
    folder, which is the world's bucket that every instance sees."""
    return Path(os.environ["SPOTHOP_HOME"]) / name


def bucketed(world: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``world`` with ``folder`` (the test's) among its buckets: the jobs' checkpoints, inputs
    and outputs live there, where every instance reaches them."""
    return {**world, "buckets": [*world.get("buckets", []), str(folder)]}


@contextlib.contextmanager
def running_harness(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    world_spec: dict[str, Any],
    extra_args: tuple[str, ...] = (),
) -> Iterator[Harness]:
    """A :class:`Harness` on ``world_spec``; on exit the controller is stopped and every
    instance of the world ended (for other test folders' fixtures too)."""
    world_path = tmp_path / "world.yaml"
    world_path.write_text(yaml.safe_dump(bucketed(world_spec, tmp_path)))
    monkeypatch.setenv("SPOTHOP_WORLD", str(world_path))
    world = load_world(world_path)
    h = Harness(
        tmp_path,
        world_path,
        f"sqlite:///{controller_file('store.db')}",
        {n: LocalProvider(n, world=world, world_path=world_path) for n in world.cloud_names},
        extra_args=extra_args,
    )
    try:
        yield h
    finally:
        stopped = daemon.stop()
        for provider in h.providers.values():
            for instance in provider.list_instances():
                provider.terminate(instance.instance_id)
        ended = [InstanceState.TERMINATED, InstanceState.PREEMPTED, InstanceState.FAILED]
        for provider in h.providers.values():
            for instance in provider.list_instances():
                provider.wait(instance.instance_id, ended, 20)
        if stopped is not None and stopped.pid:
            wait_for(lambda: not process_running(stopped.pid), 20, what="the controller's exit")


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    # The shard queue in a database of its own: the workers' commits do not queue behind the
    # job store's writes (the agents' store processes, the controller) on one SQLite file.
    queue = ("--queue-url", f"sqlite:///{controller_file('queue.db')}")
    with running_harness(tmp_path, monkeypatch, WORLD, queue) as h:
        yield h
