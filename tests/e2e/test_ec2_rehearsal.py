"""The rehearsal on EC2's API (tests/e2e/ec2_rehearsal.py): spothop's real AWS adapter against
moto's server, each instance moto starts booted here from its user-data, with spothop's AWS
metadata endpoint; the control plane's agent API on this machine's non-loopback address.

- A task job runs, is preempted once through the endpoint's notice, and succeeds; its boot
  log shows spothop installed from the control plane's wheel; the ledger's cost equals the
  instance-seconds moto reports at the prices used; ``cancel`` of a long job leaves no
  instance running in moto.
- A wrong AMI: a clear failure naming the AMI and the fix, no launch storm (the launch calls
  and the time to the failure are printed).
- User-data that exits before the agent starts: ``agent_lost``, relaunched by the job's
  policy, then failed with the boot log's tail, which ``spothop status`` shows.
- A two-node group runs, is preempted once, and succeeds.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")

from spothop import __version__
from spothop.controlplane.dist import distribution_for
from spothop.jobs.controller.config import ControllerConfig
from spothop.jobs.controller.loop import Controller
from spothop.jobs.lifecycle import EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.observe.job_report import job_report
from spothop.observe.ledger import Ledger, close_books
from spothop.paths import spothop_home
from spothop.providers.aws import AwsProvider
from spothop.providers.aws.instances import ENDED_TAG, PRICE_TAG
from spothop.service.jobs import request_cancel
from tests.e2e.ec2_rehearsal import Ec2Rehearsal, agent_api
from tests.providers.aws.moto_cloud import (
    REGION,
    Ec2Market,
    fake_credentials,
    make_provider,
    moto_server,
)
from tests.waiting import wait_for

# Spot prices of the A10G types (moto's own, USD 0.00001/h, cannot be true).
PRICES = {"g5.xlarge": 0.45, "g5.2xlarge": 0.55, "g5.4xlarge": 0.75, "g5.8xlarge": 1.2}
PASS_S = 0.25  # the controller's loop period here
EC2_MIN_BILLED_S = 60.0  # EC2 bills Linux instances per second, with a one-minute minimum
WRONG_AMI = "ami-0000000000badbad"


@dataclass
class Stage:
    """One rehearsal: moto's EC2, the provider, the control plane, the controller, the instances."""

    provider: AwsProvider
    market: Ec2Market
    ec2: Ec2Rehearsal
    store: JobStore
    store_url: str
    control_plane_url: str
    bucket: Path
    controller: Controller | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    home: Path = Path()
    queue_url: str = ""
    distribution: Any = None

    def start_controller(self, config: ControllerConfig | None = None) -> None:
        self.controller = Controller(
            JobStore(self.store_url),
            {"aws": self.provider},
            store_url=self.store_url,
            queue_url=self.queue_url,
            home=self.home,
            config=config,
            control_plane_url=self.control_plane_url,
            distribution=self.distribution,
            after_pass=(close_books,),
        )
        controller = self.controller

        def loop() -> None:
            while not self._stop.is_set():
                controller.run_pass()
                self._stop.wait(PASS_S)

        self._thread = threading.Thread(target=loop, name="controller", daemon=True)
        self._thread.start()

    def stop_controller(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if self.controller is not None:
            self.controller.close()

    def submit(self, **fields: Any) -> str:
        spec = {
            "resources": {"accelerators": "A10G:1"},
            "providers": {"allow": ["aws"]},
            "regions": [REGION],
            **fields,
        }
        return self.store.create_job(load_job(spec))

    def final(self, job_id: str, timeout_s: float) -> JobState:
        job = wait_for(
            lambda: (j := self.store.get_job(job_id)).state.final and j,
            timeout_s,
            what=f"job {job_id} to end",
            interval_s=0.2,
        )
        return job.state

    def live_instance(self, job_id: str, timeout_s: float = 120) -> str:
        """The instance id of the job's live attempt, once the rehearsal booted it."""

        def found() -> str | None:
            for attempt in self.store.attempts(job_id):
                if attempt.live and attempt.instance_id in self.ec2.booted:
                    return attempt.instance_id
            return None

        return str(wait_for(found, timeout_s, what=f"an instance of {job_id} booted"))


@pytest.fixture
def stage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Stage]:
    fake_credentials(monkeypatch, tmp_path)
    with moto_server() as endpoint:
        # The image holds spothop's dependencies (this machine's Python, as a custom AMI would):
        # the wheel is installed without them (docs/providers-aws.md).
        provider, market = make_provider(
            endpoint_url=endpoint, install_dependencies=False, pricing=False
        )
        market.prices.update(PRICES)
        store_url = f"sqlite:///{tmp_path / 'store.db'}"
        queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
        store = JobStore(store_url)
        bucket = tmp_path / "bucket"  # S3's stand-in: the same folder on every instance
        bucket.mkdir()
        ec2 = Ec2Rehearsal(endpoint, tmp_path / "instances", market, buckets=[bucket])
        ec2.attach(provider)
        with agent_api(store_url, queue_url, tmp_path / "agent-api.log") as api:
            stage = Stage(
                provider=provider,
                market=market,
                ec2=ec2,
                store=store,
                store_url=store_url,
                control_plane_url=api.url,
                bucket=bucket,
                home=tmp_path,
                queue_url=queue_url,
                distribution=distribution_for(api.url, spothop_home()),
            )
            ec2.start()
            try:
                yield stage
            finally:
                stage.stop_controller()
                for raw in ec2.raw_instances():
                    if raw["State"]["Name"] in ("pending", "running"):
                        ec2.ec2.terminate_instances(InstanceIds=[raw["InstanceId"]])
                ec2.stop()
                store.close()


def spothop(*args: str) -> tuple[int, str]:
    """``spothop ARGS`` in this process: exit code, stdout and stderr together."""
    from spothop.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(list(args))
    return code, out.getvalue()


def moto_usage(raws: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """What moto's records say of each instance: (seconds from ``LaunchTime`` to its end,
    spothop's end tag else the time of EC2's ``StateTransitionReason``; its price tag)."""
    import datetime as dt
    import re

    usage = {}
    for raw in raws:
        tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])}
        launched = raw["LaunchTime"].timestamp()
        if ENDED_TAG in tags:
            ended = float(tags[ENDED_TAG])
        else:
            stamp = re.search(
                r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)", raw["StateTransitionReason"]
            )
            assert stamp, raw["StateTransitionReason"]
            ended = (
                dt.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
                .replace(tzinfo=dt.UTC)
                .timestamp()
            )
        usage[str(raw["InstanceId"])] = (max(0.0, ended - launched), float(tags[PRICE_TAG]))
    return usage


def test_a_task_job_on_ec2_is_preempted_once_succeeds_and_costs_what_moto_bills(
    stage: Stage,
) -> None:
    stage.start_controller()
    marker = stage.bucket / "ran-once"
    # The first attempt runs until it is stopped; the one after the preemption finishes.
    job_id = stage.submit(
        name="ec2-task",
        run=f"if [ -e {marker} ]; then echo rehearsal-done; else touch {marker}; sleep 600; fi",
    )
    first = stage.live_instance(job_id)
    wait_for(marker.exists, 180, what="the first attempt's worker to start", interval_s=0.2)
    stage.ec2.preempt(first)
    assert stage.final(job_id, 300) is JobState.SUCCEEDED

    attempts = stage.store.attempts(job_id)
    reasons = [a.end_reason for a in attempts if a.instance_id]
    assert reasons[0] is EndReason.PREEMPTED and reasons[-1] is EndReason.SUCCEEDED, reasons
    assert attempts[0].instance_id == first
    kinds = [e.kind for e in stage.store.events(job_id)]
    print("events:", kinds)
    # The agent saw the endpoint's notice and told the controller before the instance went.
    assert (
        kinds.index("attempt_noticed")
        < kinds.index("job_recovering")
        < kinds.index("job_succeeded")
    )
    # The boot log: spothop from the control plane's wheel, on the instance the cloud gave.
    console = stage.ec2.console(first)
    assert f"spothop: installed spothop {__version__} from {stage.control_plane_url}/v1/dist/" in (
        console
    ), console[-2000:]

    # Nothing left running at the cloud, and the ledger's cost is what moto's records bill.
    wait_for(lambda: not stage.ec2.running(job_id), 60, what="every instance of the job ended")
    ledger = Ledger(stage.store, {"aws": stage.provider})

    def closed() -> list[Any]:
        records = ledger.records(job_id)
        launched = {a.attempt_id for a in stage.store.attempts(job_id) if a.instance_id}
        ok = {r.attempt_id for r in records if r.closed} >= launched
        return records if ok else []

    records = wait_for(closed, 60, what="the ledger to close every attempt", interval_s=0.5)
    usage = moto_usage(stage.ec2.raw_instances(job_id))
    # EC2's rule for Linux: per second, with a one-minute minimum.
    billed = sum(
        round(price * max(seconds, EC2_MIN_BILLED_S) / 3600 * 1e6)
        for seconds, price in usage.values()
    )
    cost = sum(r.cost_microusd or 0 for r in records)
    seconds = sum(s for s, _ in usage.values())
    print(f"ledger {cost} µUSD; moto {seconds:.1f} instance-seconds → {billed} µUSD")
    assert {r.instance_id: round(r.usage_s, 3) for r in records} == {
        i: round(s, 3) for i, (s, _) in usage.items()
    }
    assert abs(cost - billed) <= len(records)  # a µUSD of rounding per record
    # The report says where its figures come from: spothop reads no bill of EC2's, so its cost is
    # an estimate, never "reconciled" against itself; goodput counts only reported work.
    report = job_report(stage.store, job_id, {"aws": stage.provider}).to_dict()
    by_provider = report["reconciliation"]["by_provider"]
    assert [(p["provider"], p["summary"]) for p in by_provider] == [
        ("aws", "estimated, not reconciled")
    ]
    assert report["goodput_basis"] == "work the agents reported"

    # cancel: a long job's instance ends at the cloud.
    long_id = stage.submit(name="ec2-long", run="sleep 600")
    instance = stage.live_instance(long_id)
    wait_for(
        lambda: "spothop: installed spothop" in stage.ec2.console(instance),
        120,
        what="the long job's instance to boot",
    )
    # What `spothop cancel` asks (the service; this test's controller is the one acting on it,
    # as a server's is: the command would also start the home's daemon).
    request_cancel(stage.store, long_id)
    assert stage.final(long_id, 120) is JobState.CANCELLED
    wait_for(lambda: not stage.ec2.running(long_id), 60, what="cancel to end the instance in moto")
    outcome = wait_for(lambda: stage.ec2.booted[instance].outcome, 30, what="its processes ended")
    assert "by the cloud's API" in outcome


def test_a_wrong_ami_fails_the_job_clearly_without_a_launch_storm(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    import moto.settings

    monkeypatch.setattr(moto.settings, "ENABLE_AMI_VALIDATION", True)  # EC2 looks the AMI up
    stage.provider.image_id = WRONG_AMI
    refused: list[float] = []  # when EC2 answered each RunInstances (its error)
    stage.provider.client(REGION).meta.events.register(
        "after-call.ec2.RunInstances", lambda **_: refused.append(time.monotonic())
    )
    stage.start_controller()
    job_id = stage.submit(name="ec2-wrong-ami", run="echo never")
    assert stage.final(job_id, 60) is JobState.FAILED
    failed = time.monotonic()
    launches = [name for name, _ in stage.market.calls if name == "RunInstances"]
    # Issue W's performance: from the configuration error to the job's clear failure, at most
    # 2 launch calls and 5 s (printed, not asserted: a loaded machine's pace is not the rule).
    print(
        f"wrong AMI: {len(launches)} RunInstances call(s); "
        f"{failed - refused[0]:.2f} s from EC2's refusal to the job's failure"
    )
    assert 1 <= len(launches) <= 2
    job = stage.store.get_job(job_id)
    # The cloud's message names the AMI; the adapter's hint names the fix.
    assert WRONG_AMI in job.reason and "InvalidAMIID" in job.reason, job.reason
    assert "SPOTHOP_AWS_IMAGE_ID" in job.reason, job.reason
    _code, said = spothop("status", job_id, "--store", stage.store_url)
    assert WRONG_AMI in said and "SPOTHOP_AWS_IMAGE_ID" in said, said
    assert "Traceback" not in said
    assert not stage.ec2.running(job_id)


def test_user_data_that_exits_before_the_agent_is_agent_lost_then_the_job_fails_with_its_tail(
    stage: Stage,
) -> None:
    # The boot script's install step fails before the agent unit is started: the VM stays up.
    said = "pip: could not reach the package index (network is unreachable)"
    stage.provider.install = f"echo '{said}' >&2; exit 1"
    stage.start_controller(ControllerConfig(boot_deadline_s=8.0, agent_lost_limit=2))
    job_id = stage.submit(name="ec2-no-agent", run="echo never")
    assert stage.final(job_id, 240) is JobState.FAILED
    attempts = [a for a in stage.store.attempts(job_id) if a.instance_id]
    # The policy: the lost node relaunched once, the loop of two lost agents fails the job.
    assert [a.end_reason for a in attempts] == [EndReason.AGENT_LOST] * 2
    job = stage.store.get_job(job_id)
    assert said in job.reason, job.reason
    _code, status = spothop("status", job_id, "--store", stage.store_url)
    assert said in status and "agent" in status, status
    wait_for(lambda: not stage.ec2.running(job_id), 60, what="the lost instances terminated")


def test_a_two_node_group_on_ec2_is_preempted_once_and_succeeds(stage: Stage) -> None:
    stage.start_controller()
    # Each node's worker sees the group's rendezvous (node 0's registered address and port).
    # Generation 0 runs until it is stopped; a later one meets at a barrier in the bucket (as
    # torchrun's workers meet: neither ends before the other joined) and finishes.
    bucket = stage.bucket
    job_id = stage.submit(
        name="ec2-group",
        num_nodes=2,
        run=(
            'test "$SPOTHOP_NNODES" = 2 && test -n "$MASTER_ADDR" && test -n "$MASTER_PORT"'
            ' || exit 3; g="$SPOTHOP_GROUP_GENERATION"; r="$SPOTHOP_NODE_RANK";'
            f' touch "{bucket}/gen-$g-rank-$r"; if [ "$g" = 0 ]; then sleep 600; exit 5; fi;'
            f' for i in $(seq 3000); do [ -e "{bucket}/gen-$g-rank-0" ] &&'
            f' [ -e "{bucket}/gen-$g-rank-1" ] && exit 0; sleep 0.1; done; exit 4'
        ),
    )

    first = stage.live_instance(job_id, 180)
    started = [bucket / f"gen-0-rank-{rank}" for rank in (0, 1)]
    wait_for(lambda: all(p.exists() for p in started), 180, what="both workers of generation 0")
    stage.ec2.preempt(first)
    assert stage.final(job_id, 300) is JobState.SUCCEEDED
    attempts = [a for a in stage.store.attempts(job_id) if a.instance_id]
    (preempted,) = [a for a in attempts if a.end_reason is EndReason.PREEMPTED]
    assert preempted.instance_id == first
    # The group re-formed whole: both nodes of a later generation succeeded, each on an
    # instance of its own.
    done = [a for a in attempts if a.end_reason is EndReason.SUCCEEDED]
    assert sorted(a.node for a in done) == [0, 1], [(a.node, a.end_reason) for a in attempts]
    assert len({a.generation for a in done}) == 1 and done[0].generation > preempted.generation
    assert len({a.instance_id for a in done}) == 2
    wait_for(lambda: not stage.ec2.running(job_id), 60, what="every node's instance ended")
