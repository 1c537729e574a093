"""On an accelerated world, the metadata endpoint prints a notice's time on the instance's clock.

An instance's processes read the wall clock; the local cloud's clock runs
``speed`` times faster. The host kills a noticed instance at the wall instant
its simulated deadline falls on, so the deadline the endpoint prints must be
that wall instant: an agent that reads a 120-simulated-second notice as 120
wall seconds budgets its save for far longer than it has, is killed mid-save,
and never hands its leases back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from tests.waiting import scaled, wait_for

SPEED = 30
LEAD_S = 120  # simulated: 4 wall seconds at speed 30
WORLD = f"""
seed: 3
speed: {SPEED}
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: {LEAD_S}
    launch_delay_s: 0
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {{mean_time_between_preemptions_s: 315360000, mean_outage_s: 600}}
  - name: azure-sim
    protocol: azure
    catalog: azure
    notice_lead_time_s: {LEAD_S}
    launch_delay_s: 0
    locations: [eastus]
    instance_types: [Standard_NC4as_T4_v3]
    market:
      synthetic: {{mean_time_between_preemptions_s: 315360000, mean_outage_s: 600}}
"""
# What the agent does on the instance: its own watcher for the cloud's protocol, polled until
# the final notice, which it writes down with its wall clock's reading of the deadline.
WATCH = """
import json, os, sys, time
from spothop.agent.notices import make_watcher
watcher = make_watcher(os.environ["SPOTHOP_METADATA_PROTOCOL"], os.environ["SPOTHOP_METADATA_URL"])
open(sys.argv[1] + ".ready", "w").close()
while True:
    final = [n for n in watcher.poll() if n.kind.value == "final"]
    if final:
        n = final[0]
        json.dump({"lead_time_s": n.lead_time_s, "left_s": n.deadline - time.time()}, open(sys.argv[1], "w"))
        break
    time.sleep(0.05)
time.sleep(600)
"""
MARKETS = {
    "aws-sim": ("g5.xlarge", "us-east-1", "us-east-1a"),
    "azure-sim": ("Standard_NC4as_T4_v3", "eastus", None),
}


@pytest.mark.parametrize("cloud", sorted(MARKETS))
def test_a_notice_deadline_is_the_wall_instant_the_instance_is_reclaimed(
    tmp_path: Path, providers: list[LocalProvider], cloud: str
) -> None:
    world_path = tmp_path / "world.yaml"
    world_path.write_text(WORLD)
    provider = LocalProvider(cloud, world_path=world_path)
    providers.append(provider)
    out = tmp_path / "notice.json"
    instance_type, region, zone = MARKETS[cloud]
    instance = provider.launch(
        LaunchRequest(
            instance_type=instance_type,
            region=region,
            zone=zone,
            bootstrap_command=[sys.executable, "-c", WATCH, str(out)],
        )
    )
    provider.wait(instance.instance_id, [InstanceState.RUNNING], scaled(20))
    wait_for(lambda: Path(f"{out}.ready").exists(), scaled(30), what="the watcher to start")
    provider.preempt(instance.instance_id, lead_time_s=LEAD_S)
    wait_for(out.exists, scaled(30), what="the watcher to see the final notice")
    seen = json.loads(out.read_text())
    wall_lead_s = LEAD_S / SPEED
    # The printed time is whole seconds (rounded down) and read after the notice: never more.
    assert seen["lead_time_s"] <= wall_lead_s + 1.0, seen
    assert seen["left_s"] <= wall_lead_s + 1.0, seen
    ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(30))
    assert ended.state is InstanceState.PREEMPTED
