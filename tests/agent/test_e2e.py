"""End to end on the local cloud: the agent is each instance's bootstrap command, a real process.

All instances are launched and preempted together (one module fixture), so
the whole suite takes one notice window, not seven. Each test then asserts
one protocol's outcome: worker stopped, its emergency checkpoint present,
leases released, interruption recorded, agent exited 75 before the kill.
The instances share nothing with the test but the network and a bucket: the
worker and the lease releaser are shipped in the bucket, the agents record
through the control plane, and their state is read on each instance's disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.providers.base import Instance, InstanceState
from spothop.providers.local.provider import LocalProvider
from tests.agent.fakes import RELEASES_ENV, FileReleaser
from tests.agent.shared_nothing import STATE_ROOT, Cloud, shared_nothing
from tests.providers.local.conftest import wait_for

LEAD_S = 4.0  # the injected notice's lead: short, so the suite is fast
IGNORE_LEAD_S = 6.0  # the worker that ignores SIGTERM uses up its budget; more room for the rest
POLL_S = 0.2
HERE = Path(__file__).parent

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
    cloud: Cloud
    instance: Instance
    out: Path  # in the bucket: the worker's marker files and the releases file
    releases: FileReleaser

    @property
    def provider(self) -> LocalProvider:
        return self.cloud.provider(self.instance.provider)

    @property
    def state_dir(self) -> Path:
        """The agent's state folder on the instance's own disk."""
        return self.cloud.on_instance(self.instance, f"{STATE_ROOT}/{self.out.name}")


def _launch(case: str, cloud: Cloud, code: Path) -> Run:
    protocol = "aws" if case in ("sigterm", "ignore") else case
    name, instance_type, region, zone = PLACES[protocol]
    out = cloud.bucket / case
    out.mkdir()
    releases = FileReleaser(out / "releases.txt")
    options = [
        "--poll-interval",
        str(POLL_S),
        "--safety-margin",
        "2.5" if case == "ignore" else "1",
        "--state-dir",
        f"{STATE_ROOT}/{case}",
        "--job-id",
        f"e2e-{case}",
        "--lease-releaser",
        "fakes:file_releaser",  # shipped in the bucket with the worker
        "--assumed-lead",
        str(LEAD_S - 1),
        "--sigterm-grace",
        str(LEAD_S - 1),
        "--cloud",
        name,
    ]
    if case == "sigterm":
        options += ["--protocol", "sigterm"]
    worker = ["python", str(code / "worker.py"), str(out), "ignore" if case == "ignore" else "save"]
    instance = cloud.launch(
        name,
        (instance_type, region, zone),
        f"e2e-{case}",
        cloud.agent(*options, worker=worker),
        env={"PYTHONPATH": str(code), RELEASES_ENV: str(releases.path)},
    )
    return Run(cloud, instance, out, releases)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    root = tmp_path_factory.mktemp("e2e")
    home = pytest.MonkeyPatch()
    home.setenv("SPOTHOP_HOME", str(root / "home"))  # the control plane's wheel is cached there
    try:
        with shared_nothing(root) as cloud:
            code = cloud.ship(HERE / "worker.py", HERE / "fakes.py")
            runs = {case: _launch(case, cloud, code) for case in CASES}
            for run in runs.values():
                started = wait_for(lambda r=run: (r.out / "started").exists(), timeout_s=60)
                assert started, cloud.console(run.instance)
                wait_for(lambda r=run: read_events(r.state_dir, "self_check"), timeout_s=10)
            for case, run in runs.items():
                if case == "sigterm":
                    # the host SIGTERMs the agent: a pod's eviction
                    run.provider.terminate(run.instance.instance_id)
                else:
                    run.provider.preempt(
                        run.instance.instance_id, IGNORE_LEAD_S if case == "ignore" else LEAD_S
                    )
            for run in runs.values():
                run.provider.wait(
                    run.instance.instance_id,
                    [InstanceState.PREEMPTED, InstanceState.TERMINATED],
                    20,
                )
            yield runs
    finally:
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

    store = InterruptionStore(next(iter(runs.values())).cloud.store_url)
    got = {(i.market.provider, i.instance_id) for i in store.interruptions()}
    assert got >= {(PLACES[c][0], runs[c].instance.instance_id) for c in PLACES}
