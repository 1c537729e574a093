"""End to end on the local cloud: the agent is each instance's bootstrap command, a real process.

All instances are launched and preempted together (one module fixture), so
the whole suite takes one notice window, not seven. Each test then asserts
one protocol's outcome: worker stopped, its emergency checkpoint present,
leases released, interruption recorded, agent exited 75 before the kill.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.providers.base import Instance, InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.agent.fakes import RELEASES_ENV, FileReleaser
from tests.conftest import PROJECT_ROOT
from tests.providers.local.conftest import wait_for

LEAD_S = 4.0  # the injected notice's lead: short, so the suite is fast
IGNORE_LEAD_S = 6.0  # the worker that ignores SIGTERM uses up its budget; more room for the rest
POLL_S = 0.2
WORKER = str(Path(__file__).with_name("worker.py"))

# protocol → (cloud, instance type, region, zone)
PLACES = {
    "aws": ("aws-sim", "g5.xlarge", "us-east-1", "us-east-1a"),
    "gcp": ("gcp-sim", "g2-standard-4", "us-central1", "us-central1-a"),
    "azure": ("azure-sim", "Standard_NC4as_T4_v3", "eastus", "eastus"),
    "aliyun": ("aliyun-sim", "ecs.gn6i-c4g1.xlarge", "cn-hangzhou", "cn-hangzhou-i"),
    "tencent": ("tencent-sim", "GN7.2XLARGE32", "ap-guangzhou", "ap-guangzhou-3"),
    "volcengine": ("volcengine-sim", "ecs.gni2.3xlarge", "cn-beijing", "cn-beijing-a"),
}
CASES = [*PLACES, "sigterm", "ignore"]


@dataclass
class Run:
    provider: LocalProvider
    instance: Instance
    out: Path
    releases: FileReleaser

    @property
    def state_dir(self) -> Path:
        return self.out / "agent"


def _launch(case: str, providers: dict[str, LocalProvider], root: Path) -> Run:
    protocol = "aws" if case in ("sigterm", "ignore") else case
    cloud, instance_type, region, zone = PLACES[protocol]
    out = root / case
    out.mkdir()
    releases = FileReleaser(out / "releases.txt")
    options = [
        "--poll-interval",
        str(POLL_S),
        "--safety-margin",
        "2.5" if case == "ignore" else "1",
        "--state-dir",
        str(out / "agent"),
        "--lease-releaser",
        "tests.agent.fakes:file_releaser",
        "--assumed-lead",
        str(LEAD_S - 1),
        "--sigterm-grace",
        str(LEAD_S - 1),
        "--cloud",
        cloud,
    ]
    if case == "sigterm":
        options += ["--protocol", "sigterm"]
    command = [
        sys.executable,
        "-m",
        "spothop.agent",
        "run",
        *options,
        "--",
        sys.executable,
        WORKER,
        str(out),
        "ignore" if case == "ignore" else "save",
    ]
    provider = providers.setdefault(cloud, LocalProvider(cloud, world=load_world()))
    instance = provider.launch(
        LaunchRequest(
            instance_type=instance_type,
            region=region,
            zone=zone,
            bootstrap_command=command,
            env={"PYTHONPATH": str(PROJECT_ROOT), RELEASES_ENV: str(releases.path)},
        )
    )
    return Run(provider, instance, out, releases)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    root = tmp_path_factory.mktemp("e2e")
    home = pytest.MonkeyPatch()
    home.setenv("SPOTHOP_HOME", str(root / "home"))  # the agents record into this store
    providers: dict[str, LocalProvider] = {}
    runs = {case: _launch(case, providers, root) for case in CASES}
    try:
        for run in runs.values():
            wait_for(lambda r=run: (r.out / "started").exists(), timeout_s=20)
            wait_for(lambda r=run: read_events(r.state_dir, "self_check"), timeout_s=10)
        for case, run in runs.items():
            if case == "sigterm":
                run.provider.terminate(
                    run.instance.instance_id
                )  # the host SIGTERMs the agent: a pod's eviction
            else:
                run.provider.preempt(
                    run.instance.instance_id, IGNORE_LEAD_S if case == "ignore" else LEAD_S
                )
        for run in runs.values():
            run.provider.wait(
                run.instance.instance_id, [InstanceState.PREEMPTED, InstanceState.TERMINATED], 20
            )
        yield runs
    finally:
        for run in runs.values():
            run.provider.terminate(run.instance.instance_id)
        home.undo()


def _row(run: Run) -> dict[str, object]:
    row = run.provider.store.instance(run.instance.instance_id)
    assert row is not None
    return row


@pytest.mark.parametrize("case", [*PLACES, "sigterm"])
def test_notice_stops_the_worker_saves_releases_records_and_exits_before_the_kill(
    runs: dict[str, Run], case: str
) -> None:
    run = runs[case]
    row = _row(run)
    expected_state = InstanceState.TERMINATED if case == "sigterm" else InstanceState.PREEMPTED
    assert row["state"] == expected_state.value
    assert row["exit_code"] == EXIT_PREEMPTED  # the agent's own exit, before the host's SIGKILL
    assert (run.out / "emergency.ckpt").read_text().startswith("step=42")
    worker_id = (run.out / "started").read_text()
    assert worker_id == run.instance.instance_id
    assert run.releases.calls() == [worker_id]
    [record] = read_events(run.state_dir, "interruption")
    assert record["saved"] == "saved" and record["saved_detail"]["step"] == 42
    assert record["leases_released"] == 1
    assert record["protocol"] == case and record["notice_kind"] == "final"
    assert record["instance_id"] == run.instance.instance_id
    if case != "sigterm":
        assert record["instance_type"] == PLACES[case][1]
        assert 0 <= record["lead_time_s"] <= LEAD_S
    assert set(record["steps_s"]) >= {"stop", "save", "release"}
    [recorded] = read_events(run.state_dir, "interruption_recorded")
    assert "record" in recorded["steps_s"] and recorded["errors"] == {}
    [exit_event] = read_events(run.state_dir, "exited")
    assert exit_event["code"] == EXIT_PREEMPTED


def test_a_worker_that_ignores_sigterm_still_has_its_leases_released_before_the_kill(
    runs: dict[str, Run],
) -> None:
    run = runs["ignore"]
    row = _row(run)
    assert row["state"] == InstanceState.PREEMPTED.value
    assert row["exit_code"] == EXIT_PREEMPTED
    assert not (run.out / "emergency.ckpt").exists()
    assert run.releases.calls() == [run.instance.instance_id]
    [record] = read_events(run.state_dir, "interruption")
    assert record["saved"] == "nothing" and record["leases_released"] == 1


def test_the_interruptions_reach_the_store(runs: dict[str, Run]) -> None:
    from spothop.market.interruptions import InterruptionStore

    root = next(iter(runs.values())).out.parent
    store = InterruptionStore(f"sqlite:///{root / 'home' / 'spothop.db'}")
    got = {(i.market.provider, i.instance_id) for i in store.interruptions()}
    assert got >= {(PLACES[c][0], runs[c].instance.instance_id) for c in PLACES}
