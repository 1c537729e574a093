"""An instance whose host process (its hypervisor) is SIGKILLed mid-run: the cloud marks it failed
when it finds the host gone, and bills it until then, as a real cloud bills a VM until it marks
it ended; spothop's ledger, which charges the cloud's running_at … ended_at, then agrees with the
cloud's own bill to the micro-dollar."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path

from spothop.jobs.lifecycle import AttemptState
from spothop.jobs.records import AttemptRecord
from spothop.jobs.store import JobStore
from spothop.observe.ledger import Ledger
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.providers.local.conftest import pid_alive
from tests.waiting import scaled, wait_for

# 60 simulated seconds per wall second; a market that changes its price every simulated minute
# (the bill closes a line at each step) and does not reclaim the instance during the test.
WORLD = """
seed: 9
speed: 60
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {mean_time_between_preemptions_s: 100000000, mean_outage_s: 600, tick_s: 60}
      start_offset_s: 0
"""


def _attempt(instance_id: str, price: float) -> AttemptRecord:
    """The controller's record of the instance, as the ledger prices it."""
    return AttemptRecord(
        "a-00000001", "j-000001", 0, "t-1", "aws-sim", "us-east-1", "us-east-1a", "g5.xlarge",
        "spot", price, instance_id, AttemptState.ENDED, 0.0, 0.0, None, 0.0, None, None, None,
        None,
    )  # fmt: skip


def test_a_killed_hosts_instance_is_billed_until_the_cloud_marks_it_ended(
    world_file, providers: list[LocalProvider], tmp_path: Path
) -> None:
    path = world_file(WORLD)
    aws = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(aws)
    launched = aws.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=["bash", "-c", "sleep 3000"],
        )
    )
    running = aws.wait(launched.instance_id, [InstanceState.RUNNING], scaled(20))
    assert running.state is InstanceState.RUNNING and running.running_at is not None
    # Past the cloud's 60-second minimum and a few price steps, then the host dies.
    wait_for(lambda: aws.clock.now() > running.running_at + 150, scaled(30), what="150 s running")
    row = aws.store.instance(launched.instance_id)
    assert row is not None and row["host_pid"]
    os.kill(row["host_pid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(row["host_pid"]), scaled(10), what="the host to die")
    died_billed = aws.store.instance(launched.instance_id)["cost_micro_usd"]  # type: ignore[index]
    # The cloud finds the host gone some simulated minutes later (a listing, a describe).
    later = aws.clock.now() + 120
    wait_for(lambda: aws.clock.now() > later, scaled(10), what="the cloud's clock to move on")
    ended = aws.describe(launched.instance_id)
    assert ended.state is InstanceState.FAILED and ended.ended_at is not None
    assert ended.ended_at >= later
    rows = aws.store.billing_rows(launched.instance_id)
    # The bill runs until the cloud marked it ended, line after line without a gap.
    assert rows[0]["start_s"] == ended.running_at and rows[-1]["end_s"] == ended.ended_at
    assert all(a["end_s"] == b["start_s"] for a, b in itertools.pairwise(rows))
    assert sum(r["cost_micro_usd"] for r in rows) == ended.cost_microusd > died_billed
    assert ended.billed_seconds == aws.capabilities.billing.billed_seconds(
        ended.ended_at - ended.running_at
    )
    with JobStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        record = Ledger(store, {"aws-sim": aws}).price(
            _attempt(launched.instance_id, running.price_usd_per_hour)
        )
    assert record.closed and record.provider_cost_microusd == ended.cost_microusd
    assert record.cost_microusd == ended.cost_microusd
