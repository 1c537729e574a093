import json
import random
import urllib.request
from pathlib import Path

import pytest

from spothop.errors import CapacityUnavailable, ConfigError, PriceTooLow, ProviderError
from spothop.providers.base import InstanceState, LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from spothop.providers.registry import get_provider, provider_names
from tests.conftest import shared_path
from tests.providers.local.conftest import pid_alive
from tests.waiting import scaled, wait_for

# A bootstrap command that records its own pid and a child's, then waits.
FAMILY = "sleep 300 & echo $! > child.pid; echo $$ > leader.pid; wait"


class PinnedClock:
    """A clock a test sets to any instant (a ManualClock only moves forward)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _pids(directory: Path) -> tuple[int, int]:
    wait_for(lambda: (directory / "child.pid").exists() and (directory / "leader.pid").exists())
    return int((directory / "leader.pid").read_text()), int((directory / "child.pid").read_text())


def _launch(provider: LocalProvider, command: str = FAMILY, **kwargs):  # type: ignore[no-untyped-def]
    request = LaunchRequest(
        instance_type="g5.xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=["bash", "-c", command],
        **kwargs,
    )
    return provider.launch(request)


def _imds(url: str, path: str) -> tuple[int, str]:
    token_request = urllib.request.Request(
        f"{url}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
    )
    token = urllib.request.urlopen(token_request, timeout=5).read().decode()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(f"{url}{path}", headers={"X-aws-ec2-metadata-token": token}),
            timeout=5,
        ) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_launched_instance_runs_and_terminate_ends_its_whole_group(aws):
    instance = _launch(aws)
    # Pending until the launch delay has passed (a slow machine may already be past it).
    assert (
        instance.state in (InstanceState.PENDING, InstanceState.RUNNING) and instance.metadata_url
    )
    running = aws.wait(instance.instance_id, [InstanceState.RUNNING], scaled(10))
    assert running.state is InstanceState.RUNNING
    directory = aws.store.instances_dir / instance.instance_id
    leader, child = _pids(directory)
    assert pid_alive(leader) and pid_alive(child)
    aws.terminate(instance.instance_id)
    ended = aws.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(15))
    assert ended.state is InstanceState.TERMINATED
    wait_for(lambda: not pid_alive(leader) and not pid_alive(child))
    assert (
        ended.billed_seconds > 0
        and ended.cost_microusd > 0
        and isinstance(ended.cost_microusd, int)
    )
    aws.terminate(instance.instance_id)  # idempotent
    aws.terminate("i-0doesnotexist")  # unknown: a no-op, as the contract says
    assert aws.describe(instance.instance_id).state is InstanceState.TERMINATED


def test_metadata_endpoint_speaks_the_clouds_protocol(aws):
    instance = _launch(aws)
    assert _imds(instance.metadata_url, "/latest/meta-data/instance-id") == (
        200,
        instance.instance_id,
    )
    assert _imds(instance.metadata_url, "/latest/meta-data/placement/availability-zone") == (
        200,
        "us-east-1a",
    )
    assert _imds(instance.metadata_url, "/latest/meta-data/spot/instance-action")[0] == 404


def test_injected_preemption_gives_the_notice_then_sigkills_at_the_deadline(aws):
    instance = _launch(
        aws, command="trap '' TERM; " + FAMILY
    )  # ignores SIGTERM: only SIGKILL ends it
    aws.wait(instance.instance_id, [InstanceState.RUNNING], scaled(10))
    leader, child = _pids(aws.store.instances_dir / instance.instance_id)
    lead = scaled(
        4.0
    )  # room to read the notice and look before it runs out, on a loaded machine too
    aws.preempt(instance.instance_id, lead_time_s=lead)
    _status, body = wait_for(
        lambda: (
            (r := _imds(instance.metadata_url, "/latest/meta-data/spot/instance-action"))[0] == 200
            and r
        )
    )
    action = json.loads(body)
    assert action["action"] == "terminate"
    noticed = aws.describe(instance.instance_id)
    assert noticed.state is InstanceState.NOTICED
    assert noticed.termination_time - noticed.notice_time == pytest.approx(lead)
    # Still alive inside the lead time...
    assert noticed.termination_time > aws.clock.now()
    assert pid_alive(leader) and pid_alive(child)
    # ...and gone at the deadline, though it ignores SIGTERM.
    ended = aws.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(10))
    assert ended.state is InstanceState.PREEMPTED
    assert ended.ended_at >= noticed.termination_time
    wait_for(lambda: not pid_alive(leader) and not pid_alive(child))


def test_gcp_instance_sees_preempted_true(providers):
    gcp = LocalProvider("gcp-sim", world=load_world())
    providers.append(gcp)
    instance = gcp.launch(
        LaunchRequest(
            instance_type="g2-standard-4",
            region="us-central1",
            zone="us-central1-a",
            bootstrap_command=["sleep", "300"],
        )
    )

    def preempted() -> str:
        request = urllib.request.Request(
            f"{instance.metadata_url}/computeMetadata/v1/instance/preempted",
            headers={"Metadata-Flavor": "Google"},
        )
        return urllib.request.urlopen(request, timeout=5).read().decode()

    assert preempted() == "FALSE"
    gcp.preempt(instance.instance_id, lead_time_s=30)
    wait_for(lambda: preempted() == "TRUE")
    gcp.terminate(instance.instance_id)


def test_bootstrap_exit_shuts_the_instance_down_and_billing_is_recorded(aws):
    instance = _launch(aws, command="sleep 1.5; exit 3")
    ended = aws.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(15))
    assert ended.state is InstanceState.TERMINATED
    row = aws.store.instance(instance.instance_id)
    assert row is not None and row["exit_code"] == 3 and "code 3" in row["end_reason"]
    rows = aws.store.billing_rows(instance.instance_id)
    # The cloud's bill: its rows (one per price step) add up to the instance's cost exactly.
    assert rows and sum(r["cost_micro_usd"] for r in rows) == ended.cost_microusd > 0
    # 1.5 s of running billed under the imitated cloud's rule: EC2's 60-second minimum.
    assert ended.billed_seconds == aws.capabilities.billing.minimum_s == 60


def test_on_demand_is_billed_at_list_price(aws):
    instance = _launch(aws, spot=False, command="sleep 1")
    assert aws.forecast_notice(instance.instance_id) is None  # no market reclaims on-demand
    ended = aws.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(15))
    assert ended.price_usd_per_hour == pytest.approx(
        aws.world.offering("aws-sim", "us-east-1a", "g5.xlarge").on_demand_price_usd_per_hour
    )
    assert ended.cost_microusd == pytest.approx(
        ended.price_usd_per_hour * ended.billed_seconds / 3600 * 1e6, rel=0.05
    )


def test_bad_launches_raise_typed_errors_with_the_clouds_code(aws):
    with pytest.raises(ProviderError, match="not offered in us-east-9z"):
        aws.launch(LaunchRequest(instance_type="g5.xlarge", region="us-east-1", zone="us-east-9z"))
    with pytest.raises(PriceTooLow) as info:
        _launch(aws, max_price_usd_per_hour=0.0001)
    assert info.value.code == "SpotMaxPriceTooLow"
    with pytest.raises(ConfigError, match="only a live instance"):
        instance = _launch(aws, command="exit 0")
        aws.wait(instance.instance_id, [InstanceState.TERMINATED], scaled(15))
        aws.preempt(instance.instance_id)


def test_registry_finds_every_cloud_of_the_world():
    names = provider_names()
    assert {
        "aws-sim",
        "gcp-sim",
        "azure-sim",
        "aliyun-sim",
        "tencent-sim",
        "volcengine-sim",
    } <= set(names)
    assert get_provider("azure-sim").capabilities.notice_lead_time_s == 30
    assert get_provider("aws-sim").capabilities.advance_notice
    with pytest.raises(ConfigError, match="unknown provider 'ibm'"):
        get_provider("ibm")


# -- the trace-driven market -----------------------------------------------------


TRACE_WORLD = """
seed: 3
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    locations: [us-east-1a]
    instance_types: [p3.2xlarge]
    market:
      trace: {trace}
      start_offset_s: 0
"""


def test_launch_is_refused_exactly_when_the_trace_says_unavailable(world_file, providers):
    trace_path = shared_path("traces", "cant-be-late", "preemption-1node-aws-2023-04-22")
    first = sorted(trace_path.iterdir())[0]
    path = world_file(TRACE_WORLD.format(trace=first))
    clock = PinnedClock()
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path, clock=clock)
    providers.append(provider)
    key = next(iter(provider.world.market_sources))
    trace = provider.world.market_sources[key].trace
    assert trace is not None
    start = provider._market.sim_start
    rng = random.Random(5)
    down = [i for i, c in enumerate(trace.counts) if c == 0]
    up = [i for i, c in enumerate(trace.counts) if c > 0]
    request = LaunchRequest(
        instance_type="p3.2xlarge",
        region="us-east-1",
        zone="us-east-1a",
        bootstrap_command=["sleep", "60"],
    )
    for tick in rng.sample(down, 25):
        clock.t = start + tick * trace.tick_s + trace.tick_s / 2
        with pytest.raises(CapacityUnavailable) as info:
            provider.launch(request)
        assert info.value.code == "InsufficientInstanceCapacity"
    for tick in rng.sample(up, 3):
        clock.t = start + tick * trace.tick_s + trace.tick_s / 2
        instance = provider.launch(request)
        provider.terminate(instance.instance_id)


def test_replayed_availability_matches_the_trace_within_one_percent(world_file):
    trace_path = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    first = sorted(p for p in trace_path.rglob("*.json"))[0]
    path = world_file(TRACE_WORLD.format(trace=first))
    clock = PinnedClock()
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path, clock=clock)
    trace = next(iter(provider.world.market_sources.values())).trace
    assert trace is not None
    rng = random.Random(11)
    start = provider._market.sim_start
    samples = 20_000
    up = 0
    for _ in range(samples):
        (price,) = provider.spot_prices(at=start + rng.uniform(0, trace.duration_s))
        up += price.available
    assert up / samples == pytest.approx(trace.availability_fraction(), abs=0.01)


FAST_WORLD = """
seed: 9
speed: {speed}
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    advance_notice_s: 300
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {{mean_time_between_preemptions_s: 3600, mean_outage_s: 600, tick_s: 60}}
      start_offset_s: 0
"""


# Runs on the instance: finds its endpoint from the environment, as the agent
# will, and records the first rebalance recommendation and instance action it sees.
WATCHER = """
import json, os, time, urllib.request, urllib.error
url = os.environ["SPOTHOP_METADATA_URL"]
assert os.environ["SPOTHOP_METADATA_PROTOCOL"] == "aws"
def get(path):
    req = urllib.request.Request(url + "/latest/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    token = urllib.request.urlopen(req, timeout=5).read().decode()
    try:
        req = urllib.request.Request(url + path, headers={"X-aws-ec2-metadata-token": token})
        return urllib.request.urlopen(req, timeout=5).read().decode()
    except urllib.error.HTTPError:
        return None
seen = {}
while True:
    for name, path in (("rebalance", "/latest/meta-data/events/recommendations/rebalance"),
                       ("action", "/latest/meta-data/spot/instance-action")):
        if name not in seen and (body := get(path)) is not None:
            seen[name] = json.loads(body)
            with open("seen.json", "w") as f:
                json.dump(seen, f)
    time.sleep(0.02)
"""


def test_market_preemption_gives_advance_then_final_notice_then_reclaims(world_file, providers):
    # 60 simulated seconds per wall second: an hour-long market plays in a minute.
    path = world_file(FAST_WORLD.format(speed=60))
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(provider)
    key = next(iter(provider.world.market_sources))
    now = provider.clock.now()
    drop = provider._market.next_preemption_after(key, now)
    # The market starts with this test's fresh cloud, so for seed 9 its first drop is fixed:
    # up at launch, and down between 10 and 40 simulated minutes later.
    assert provider._market.is_available(key, now) and drop is not None, (
        "seed 9's market should be up at start"
    )
    assert 600 <= drop - now <= 40 * 60, (
        f"seed 9's first drop moved to {drop - now:.0f} s; pick another seed"
    )
    (script := provider.store.root / "watch.py").write_text(WATCHER)
    instance = provider.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=["python", str(script)],
        )
    )
    # The cloud's forecast of the notice: the drop less AWS's lead, before it comes.
    assert provider.forecast_notice(instance.instance_id) == pytest.approx(drop - 120, abs=1e-6)
    ended = provider.wait(instance.instance_id, [InstanceState.PREEMPTED], scaled(90))
    assert ended.state is InstanceState.PREEMPTED
    assert ended.termination_time == pytest.approx(drop, abs=1e-6)
    tick_sim_s = 0.1 * 60 * 3  # the host looks every 0.1 s wall; allow three ticks
    assert ended.termination_time - ended.notice_time == pytest.approx(120, abs=tick_sim_s)
    # Once given, the forecast is the notice itself.
    assert provider.forecast_notice(instance.instance_id) == ended.notice_time
    seen = json.loads(
        (provider.store.instances_dir / instance.instance_id / "seen.json").read_text()
    )
    assert set(seen) == {"rebalance", "action"}
