import urllib.error
import urllib.request

import pytest

from spothop.errors import ConfigError
from spothop.providers.base import LaunchRequest
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.world import load_world
from tests.conftest import shared_path

GOOD = """
seed: 1
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {mean_time_between_preemptions_s: 3600, mean_outage_s: 600}
"""


def test_default_world_has_six_protocols_with_catalog_offerings():
    world = load_world()
    protocols = {world.cloud(n).protocol for n in world.cloud_names}
    assert protocols == {"aws", "gcp", "azure", "aliyun", "tencent", "volcengine"}
    for name in world.cloud_names:
        offerings = world.offerings[name]
        assert offerings and all(o.provider == name for o in offerings)
    assert len(world.market_sources) == sum(len(v) for v in world.offerings.values())


def test_world_sells_catalog_offerings_at_catalog_prices(world_file):
    world = load_world(world_file(GOOD))
    (offering,) = world.offerings["aws-sim"]
    assert (offering.zone, offering.instance_type, offering.gpu) == (
        "us-east-1a",
        "g5.xlarge",
        "A10G",
    )
    assert offering.on_demand_price_usd_per_hour == pytest.approx(1.006, rel=0.2)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (("g5.xlarge", "g5.huge"), "instance type 'g5.huge' is not in the aws catalog"),
        (("protocol: aws", "protocol: ibm"), "unknown protocol 'ibm'"),
        (("catalog: aws", "catalog: ovh"), "catalog 'ovh' is not a built-in provider"),
        (("notice_lead_time_s: 120", "notice_lead_time_s: -5"), "key clouds.0.notice_lead_time_s"),
        (
            (
                "      synthetic: {mean_time_between_preemptions_s: 3600, mean_outage_s: 600}",
                "      trace: nowhere.json",
            ),
            "trace 'nowhere.json' not found",
        ),
        (("us-east-1a", "mars-1a"), "none of its instance types is sold in mars-1a"),
        (("seed: 1", "seed: [1"), "not valid YAML"),
        (
            ("    catalog: aws\n", "    catalog: aws\n    metadata_options: {tokens: sometimes}\n"),
            "tokens='sometimes' for 'aws' is not one of hang, optional, refused, required",
        ),
        (
            ("    catalog: aws\n", "    catalog: aws\n    metadata_options: {speed: fast}\n"),
            "takes no option 'speed' (accepted: tokens)",
        ),
    ],
)
def test_bad_world_files_name_file_key_and_fix(world_file, change, needle):
    path = world_file(GOOD.replace(*change))
    with pytest.raises(ConfigError) as info:
        load_world(path).market_sources  # noqa: B018 - traces are read lazily
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_trace_of_the_wrong_shape_is_refused(world_file, tmp_path):
    (tmp_path / "bad.json").write_text(
        '{"metadata": {"gap_seconds": 60}, "data": {"not": "a list"}}'
    )
    path = world_file(
        GOOD.replace(
            "      synthetic: {mean_time_between_preemptions_s: 3600, mean_outage_s: 600}",
            "      trace: bad.json",
        )
    )
    with pytest.raises(ConfigError, match=r"bad\.json"):
        load_world(path).market_sources  # noqa: B018


def test_trace_market_reads_a_shared_trace(world_file):
    trace = shared_path("traces", "cant-be-late", "preemption-1node-aws-2023-04-22")
    first = sorted(trace.iterdir())[0]
    world = load_world(
        world_file(
            GOOD.replace(
                "      synthetic: {mean_time_between_preemptions_s: 3600, mean_outage_s: 600}",
                f"      trace: {first}",
            )
        )
    )
    (source,) = world.market_sources.values()
    assert source.trace is not None and len(source.trace.counts) > 1000


def test_a_worlds_metadata_options_reach_every_instances_endpoint(world_file, providers):
    path = world_file(
        GOOD.replace(
            "    catalog: aws\n", "    catalog: aws\n    metadata_options: {tokens: refused}\n"
        )
    )
    provider = LocalProvider("aws-sim", world=load_world(path), world_path=path)
    providers.append(provider)
    instance = provider.launch(
        LaunchRequest(
            instance_type="g5.xlarge",
            region="us-east-1",
            zone="us-east-1a",
            bootstrap_command=["sleep", "300"],
        )
    )
    put = urllib.request.Request(
        f"{instance.metadata_url}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(put, timeout=5)
    assert refused.value.code == 403
    with urllib.request.urlopen(
        f"{instance.metadata_url}/latest/meta-data/instance-id", timeout=5
    ) as reply:
        assert reply.read().decode() == instance.instance_id  # IMDSv1: no token needed
