"""Scheduled maintenance on the local cloud: scheduled through the provider, served by the endpoint, carried out."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest

from spothop.agent import EXIT_PREEMPTED, read_events
from spothop.errors import ConfigError
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.conftest import PROJECT_ROOT
from tests.waiting import scaled, wait_for

SCHEDULED = "/latest/meta-data/events/maintenance/scheduled"
# Records SIGTERM (what a shutdown sends) in a file, then exits; idles until then. It says when
# its trap is set: the instance is running from when its boot script starts, the unit a bit later.
ON_TERM = "trap 'echo term > got-term; exit 0' TERM; touch trap-set; while true; do sleep 0.1; done"


def _launch(provider: LocalProvider, command: str = "sleep 300", **kwargs: object):  # type: ignore[no-untyped-def]
    request = LaunchRequest(
        instance_type="g5.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=["bash", "-c", command],
        **kwargs,
    )  # type: ignore[arg-type]
    return provider.launch(request)


def _scheduled(url: str) -> list[dict[str, str]]:
    token = (
        urllib.request.urlopen(
            urllib.request.Request(
                f"{url}/latest/api/token",
                method="PUT",
                headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
            ),
            timeout=5,
        )
        .read()
        .decode()
    )
    request = urllib.request.Request(
        f"{url}{SCHEDULED}", headers={"X-aws-ec2-metadata-token": token}
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        events: list[dict[str, str]] = json.loads(reply.read())
    return events


def test_a_scheduled_stop_shows_on_the_endpoint_and_can_be_canceled(aws: LocalProvider) -> None:
    instance = _launch(aws)
    event = aws.schedule_maintenance(instance.instance_id, "instance-stop", in_s=600, window_s=1800)
    assert event.event_id.startswith("instance-event-") and event.state == "active"
    assert event.not_after - event.not_before == 1800
    assert event.not_before == pytest.approx(aws.clock.now() + 600, abs=5)
    [shown] = wait_for(lambda: _scheduled(instance.metadata_url), what="the event on the endpoint")
    assert (
        shown["Code"] == "instance-stop"
        and shown["EventId"] == event.event_id
        and shown["State"] == "active"
    )
    assert shown["NotBefore"].endswith(" GMT")
    [canceled] = aws.cancel_maintenance(instance.instance_id)
    assert canceled.state == "canceled"
    wait_for(
        lambda: _scheduled(instance.metadata_url)[0]["State"] == "canceled", what="the cancellation"
    )
    assert aws.describe(instance.instance_id).state is not InstanceState.TERMINATED


def test_a_stop_that_comes_due_shuts_the_instance_down(aws: LocalProvider) -> None:
    instance = _launch(aws, ON_TERM)
    aws.wait(instance.instance_id, [InstanceState.RUNNING], scaled(30))
    wait_for(lambda: (aws.store.instances_dir / instance.instance_id / "trap-set").exists())
    event = aws.schedule_maintenance(instance.instance_id, "instance-retirement", in_s=0)
    ended = aws.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(30))
    assert ended.state is InstanceState.TERMINATED
    row = aws.store.instance(instance.instance_id)
    assert (
        row is not None
        and row["end_reason"] == f"scheduled event instance-retirement ({event.event_id})"
    )
    assert (
        Path(row["directory"]) / "got-term"
    ).exists()  # a shutdown's SIGTERM, not a bare SIGKILL
    [done] = aws.maintenance_events(instance.instance_id)
    assert done.state == "completed"


def test_a_reboot_is_a_notice_only_and_the_instance_keeps_running(aws: LocalProvider) -> None:
    instance = _launch(aws)
    aws.wait(instance.instance_id, [InstanceState.RUNNING], scaled(30))
    aws.schedule_maintenance(instance.instance_id, "system-reboot", in_s=0, window_s=3600)
    [shown] = wait_for(lambda: _scheduled(instance.metadata_url), what="the event on the endpoint")
    assert shown["Code"] == "system-reboot" and shown["State"] == "active"
    assert aws.describe(instance.instance_id).state is InstanceState.RUNNING


def test_bad_maintenance_requests_are_config_errors_that_say_what_to_use(
    aws: LocalProvider, providers: list[LocalProvider]
) -> None:
    instance = _launch(aws)
    with pytest.raises(
        ConfigError,
        match="'reboot-now' is not a scheduled event of the aws protocol; use one of instance-reboot",
    ):
        aws.schedule_maintenance(instance.instance_id, "reboot-now", in_s=60)
    with pytest.raises(ConfigError, match="--in must be ≥ 0"):
        aws.schedule_maintenance(instance.instance_id, "instance-stop", in_s=-1)
    with pytest.raises(ConfigError, match="no active scheduled event 'instance-event-x'"):
        aws.cancel_maintenance(instance.instance_id, "instance-event-x")
    gcp = LocalProvider("gcp-sim", world=load_world())
    providers.append(gcp)
    other = gcp.launch(
        LaunchRequest(
            instance_type="g2-standard-4",
            region="us-central1",
            zone="us-central1-a",
            bootstrap_command=["sleep", "300"],
        )
    )
    with pytest.raises(ConfigError, match="gcp metadata protocol serves no scheduled maintenance"):
        gcp.schedule_maintenance(other.instance_id, "instance-stop", in_s=60)


def test_the_agent_on_the_instance_checkpoints_ahead_of_a_scheduled_stop(
    aws: LocalProvider, tmp_path: Path
) -> None:
    """The whole path, real processes: the event on the endpoint, the agent's advance notice with its
    NotBefore, the worker asked for a checkpoint; then the stop itself shuts the instance down."""
    state = tmp_path / "agent"
    agent = [
        sys.executable,
        "-m",
        "spothop.agent",
        "run",
        "--protocol",
        "aws",
        "--state-dir",
        str(state),
        "--no-probe",
        "--control-plane",
        "none",
        "--",
        "sleep",
        "300",
    ]
    instance = aws.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=agent,
            env={"PYTHONPATH": str(PROJECT_ROOT / "src")},
        )
    )
    wait_for(lambda: read_events(state, "self_check"), 30, what="the agent's self-check")
    event = aws.schedule_maintenance(instance.instance_id, "instance-stop", in_s=3600)
    [notice] = wait_for(
        lambda: read_events(state, "advance_notice"), 30, what="the agent's advance notice"
    )
    assert notice["cause"] == "scheduled-event:instance-stop"
    assert notice["notice_id"] == event.event_id
    assert notice["deadline_unix_s"] == pytest.approx(
        event.not_before, abs=1.0
    )  # whole seconds on the wire
    assert notice["checkpoint_seq"] >= 1  # the worker was asked for a durable checkpoint
    aws.cancel_maintenance(instance.instance_id)
    aws.schedule_maintenance(instance.instance_id, "instance-stop", in_s=0)
    ended = aws.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(60))
    assert ended.state is InstanceState.TERMINATED
    # The shutdown's SIGTERM is the agent's final notice: it ran its emergency protocol and exited "preempted".
    assert [e["code"] for e in read_events(state, "exited")] == [EXIT_PREEMPTED]
