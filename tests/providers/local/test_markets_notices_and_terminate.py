"""Overlapping markets are refused, --advance injects AWS's two-step
notice, terminate ends every process of the instance, old cloud records still open."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from spothop.errors import ConfigError
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import load_world
from tests.providers.local.conftest import pid_alive
from tests.waiting import scaled, wait_for

GOOD = """
seed: 1
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    locations: [us-east-1a, us-east-1b]
    instance_types: [g5.xlarge]
    market:
      synthetic: {mean_time_between_preemptions_s: 3600, mean_outage_s: 600}
    markets:
      - {location: us-east-1a, instance_type: g5.xlarge, synthetic: {mean_time_between_preemptions_s: 7200, mean_outage_s: 600}}
"""
OVERRIDE = "      - {location: us-east-1a, instance_type: g5.xlarge, synthetic: {mean_time_between_preemptions_s: 7200, mean_outage_s: 600}}"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            ("[us-east-1a, us-east-1b]", "[us-east-1a, us-east-1a]"),
            "locations lists us-east-1a more than once",
        ),
        (
            ("[g5.xlarge]", "[g5.xlarge, g5.xlarge]"),
            "instance_types lists g5.xlarge more than once",
        ),
        (
            (OVERRIDE, OVERRIDE + "\n" + OVERRIDE),
            "overrides g5.xlarge in us-east-1a more than once",
        ),
        (
            (OVERRIDE, OVERRIDE.replace("us-east-1a", "us-west-2a")),
            "g5.xlarge in us-west-2a is not a market of this cloud",
        ),
        (
            ("mean_outage_s: 600}\n    markets", "mean_outage_s: 5}\n    markets"),
            "mean_outage_s (5) must be at least tick_s (60)",
        ),
        (
            ("mean_time_between_preemptions_s: 3600", "mean_time_between_preemptions_s: 30"),
            "mean_time_between_preemptions_s (30) must be at least tick_s (60)",
        ),
        (
            ("  - name: aws-sim\n", "  - name: aws-sim\n    metadata_port: 8080\n"),
            "key clouds.0.metadata_port",
        ),
    ],
)
def test_overlapping_or_unplayable_markets_are_clear_errors(
    tmp_path: Path, change: tuple[str, str], needle: str
) -> None:
    path = tmp_path / "world.yaml"
    path.write_text(GOOD.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_world(path).market_sources  # noqa: B018 - markets are built lazily
    assert needle in str(info.value) and str(path) in str(info.value)


def _imds(url: str, path: str) -> tuple[int, str]:
    put = urllib.request.Request(
        f"{url}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
    )
    with urllib.request.urlopen(put, timeout=5) as response:
        token = response.read().decode()
    get = urllib.request.Request(f"{url}{path}", headers={"X-aws-ec2-metadata-token": token})
    try:
        with urllib.request.urlopen(get, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


@pytest.fixture
def aws_launched(providers: list[LocalProvider]):  # type: ignore[no-untyped-def]
    provider = LocalProvider("aws-sim", world=load_world())
    providers.append(provider)

    def launch(command: list[str]):  # type: ignore[no-untyped-def]
        instance = provider.launch(
            LaunchRequest(
                instance_type="g5.xlarge",
                region="us-east-1",
                zone="us-east-1a",
                bootstrap_command=command,
            )
        )
        return provider, provider.wait(instance.instance_id, [InstanceState.RUNNING], scaled(20))

    return launch


def test_injected_preemption_with_advance_gives_rebalance_first_then_the_final_notice(
    aws_launched,
) -> None:  # type: ignore[no-untyped-def]
    provider, instance = aws_launched(["sleep", "300"])
    provider.preempt(instance.instance_id, lead_time_s=600, advance_s=900)
    url = instance.metadata_url
    _code, body = wait_for(
        lambda: (
            (r := _imds(url, "/latest/meta-data/events/recommendations/rebalance"))[0] == 200 and r
        )
    )
    assert "noticeTime" in json.loads(body)
    # The final notice is 900 simulated seconds away: not given yet, the instance still runs.
    assert _imds(url, "/latest/meta-data/spot/instance-action")[0] == 404
    assert provider.describe(instance.instance_id).state is InstanceState.RUNNING


def test_advance_on_a_cloud_without_one_is_refused(providers: list[LocalProvider]) -> None:
    provider = LocalProvider("gcp-sim", world=load_world())
    providers.append(provider)
    instance = provider.launch(
        LaunchRequest(
            instance_type="g2-standard-4",
            region="us-central1",
            zone="us-central1-a",
            bootstrap_command=["sleep", "300"],
        )
    )
    with pytest.raises(ConfigError, match="gcp-sim gives no advance notice"):
        provider.preempt(instance.instance_id, advance_s=10)


def test_advance_then_final_then_reclaim_with_short_windows(aws_launched) -> None:  # type: ignore[no-untyped-def]
    provider, instance = aws_launched(["sleep", "300"])
    provider.preempt(instance.instance_id, lead_time_s=0.5, advance_s=0.5)
    ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(30))
    assert ended.state is InstanceState.PREEMPTED
    assert ended.termination_time is not None and ended.notice_time is not None
    assert ended.termination_time - ended.notice_time == pytest.approx(0.5)


def test_terminate_ends_processes_that_left_the_bootstrap_group(
    aws_launched, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    pid_file = tmp_path / "escapee.pid"
    script = f"setsid sleep 1000 & echo $! > {pid_file}; exec sleep 1000"
    provider, instance = aws_launched(["sh", "-c", script])
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    worker_pgid = int(provider.store.instance(instance.instance_id)["worker_pgid"])  # type: ignore[index]
    wait_for(
        lambda: os.getpgid(pid) != worker_pgid
    )  # setsid has run: it left the bootstrap's group
    provider.terminate(instance.instance_id)
    assert (
        provider.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(30)).state
        is InstanceState.TERMINATED
    )
    wait_for(lambda: not pid_alive(pid))


def test_preemption_ends_processes_that_left_the_bootstrap_group(
    aws_launched, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    pid_file = tmp_path / "escapee.pid"
    script = f"setsid sleep 1000 & echo $! > {pid_file}; exec sleep 1000"
    provider, instance = aws_launched(["sh", "-c", script])
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    provider.preempt(instance.instance_id, lead_time_s=0)
    assert (
        provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(30)).state
        is InstanceState.PREEMPTED
    )
    wait_for(lambda: not pid_alive(pid))


def test_a_cloud_db_from_before_the_advance_column_still_opens(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'cloud.db'}")
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE instances (instance_id VARCHAR PRIMARY KEY, cloud VARCHAR NOT NULL, "
                "preempt_lead_s FLOAT)"
            )
        )
    engine.dispose()
    store = CloudStore(tmp_path)
    with store.engine.connect() as conn:
        columns = {row[1] for row in conn.execute(text("PRAGMA table_info(instances)"))}
    assert "preempt_advance_s" in columns
