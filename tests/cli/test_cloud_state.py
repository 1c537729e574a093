"""The local cloud's shared state: display commands never write it; world files are checked number by number;
an on-demand instance is never "preempted" without a notice its agent could read."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import ConfigError
from spothop.providers.local.runtime import cloud_clock, read_clock, stored_anchor
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import load_world, parse_world
from tests.conftest import shared_path

ROOT = Path(__file__).resolve().parents[2]

FAST_WORLD = """
seed: 1
speed: 50000
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {mean_time_between_preemptions_s: 21600, mean_outage_s: 1800}
"""


def _world_file(tmp_path: Path, text: str = FAST_WORLD) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


def test_showing_a_world_writes_no_anchor(cli: Callable[..., Any], tmp_path: Path) -> None:
    assert cli("cloud", "world", "--world", str(_world_file(tmp_path))).code == 0
    store = CloudStore()
    assert stored_anchor(store) is None and store.get_state("market_start") is None


def test_showing_a_faster_world_leaves_the_shared_clock_alone(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    store = CloudStore()
    cloud_clock(
        store, load_world()
    )  # the default world (speed 1) runs: its launch anchored the clock
    before = stored_anchor(store)
    result = cli("cloud", "world", "--world", str(_world_file(tmp_path)), "--json")
    assert result.code == 0, result.err
    assert stored_anchor(store) == before  # the display did not re-anchor it to speed 50000
    assert "clock runs at speed 1" in result.err and "left as it is" in result.err
    assert result.json()["speed"] == 50000


def test_read_clock_never_writes_and_continues_the_stored_clock(tmp_path: Path) -> None:
    store = CloudStore()
    fast = parse_world(FAST_WORLD, "fast.yaml")
    read_clock(store, fast)
    assert stored_anchor(store) is None
    default = load_world()
    shared = cloud_clock(store, default).now()
    shown = read_clock(store, fast).now()
    assert shared - 1 <= shown <= shared + 60  # the same instant, whatever the speed
    assert stored_anchor(store).speed == default.speed  # type: ignore[union-attr]


def test_a_launch_at_another_speed_re_anchors_continuously_when_nothing_runs() -> None:
    store = CloudStore()
    first = cloud_clock(store, load_world()).now()
    fast = parse_world(FAST_WORLD, "fast.yaml")
    again = cloud_clock(store, fast)
    assert again.now() >= first  # no jump back in simulated time
    assert stored_anchor(store).speed == 50000 and stored_anchor(store).world == "fast.yaml"  # type: ignore[union-attr]


def _running_row(store: CloudStore, instance_id: str, *, spot: bool) -> None:
    store.add_instance(
        {
            "instance_id": instance_id,
            "cloud": "aws-sim",
            "region": "us-east-1",
            "zone": "us-east-1a",
            "instance_type": "g5.xlarge",
            "spot": spot,
            "state": "running",
            "launched_at": 0.0,
            "price_usd_per_hour": 1.0,
            "billed_seconds": 0.0,
            "cost_micro_usd": 0,
            "directory": "/nonexistent",
            "name": None,
            "tags": {},
            "terminate_requested": False,
        }
    )


def test_a_launch_at_another_speed_is_refused_while_instances_run() -> None:
    store = CloudStore()
    cloud_clock(store, load_world())
    _running_row(store, "i-0running", spot=True)
    with pytest.raises(
        ConfigError, match=r"speed 1 .*1 instance\(s\) run on it \(i-0running\).*speed 50000"
    ):
        cloud_clock(store, parse_world(FAST_WORLD, "fast.yaml"))
    assert stored_anchor(store).speed == 1  # type: ignore[union-attr]


def test_preempting_an_on_demand_instance_is_refused(cli: Callable[..., Any]) -> None:
    store = CloudStore()
    _running_row(store, "i-0ondemand", spot=False)
    result = cli("cloud", "preempt", "i-0ondemand")
    assert result.code == 2 and "is on-demand" in result.err and "cloud terminate" in result.err
    assert store.instance("i-0ondemand")["preempt_lead_s"] is None  # type: ignore[index]  # nothing was injected


# -- world files: every number checked, the key and the value named ------------------------


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("speed: 50000", "speed: .nan", "key speed: speed must be greater than 0"),
        (
            "speed: 50000",
            "speed: 1.0e+12",
            "key speed: speed must be greater than 0 and at most 100000",
        ),
        ("speed: 50000", "speed: 0", "key speed:"),
        ("seed: 1", "seed: -1", "key seed: seed must be between 0 and 4294967295, got -1"),
        (
            "notice_lead_time_s: 120",
            "notice_lead_time_s: .inf",
            "key clouds.0.notice_lead_time_s: ",
        ),
        (
            "notice_lead_time_s: 120",
            "notice_lead_time_s: 1.0e+9",
            "must be between 0 and 86400 s, got 1000000000.0",
        ),
        (
            "notice_lead_time_s: 120",
            "notice_lead_time_s: 120\n    launch_delay_s: 1.0e+30",
            "key clouds.0.launch_delay_s",
        ),
        (
            "notice_lead_time_s: 120",
            "notice_lead_time_s: 120\n    advance_notice_s: -3",
            "key clouds.0.advance_notice_s",
        ),
        (
            "notice_lead_time_s: 120",
            "notice_lead_time_s: 120\n    terminate_grace_s: .nan",
            "key clouds.0.terminate_grace_s",
        ),
        (
            "mean_outage_s: 1800",
            "mean_outage_s: .nan",
            "key clouds.0.market.synthetic.mean_outage_s",
        ),
        (
            "mean_time_between_preemptions_s: 21600",
            "mean_time_between_preemptions_s: -1",
            "key clouds.0.market.synthetic.mean_time_between_preemptions_s",
        ),
        (
            "mean_outage_s: 1800",
            "mean_outage_s: 1800, capacity: 1.0e+12",
            "key clouds.0.market.synthetic.capacity",
        ),
        (
            "mean_outage_s: 1800",
            "mean_outage_s: 1800, tick_s: 0.000001",
            "key clouds.0.market.synthetic.tick_s",
        ),
        (
            "mean_outage_s: 1800",
            "mean_outage_s: 1800, spot_ratio: 7",
            "key clouds.0.market.synthetic.spot_ratio",
        ),
        (
            "speed: 50000",
            "speed: fast",
            "key speed: Input should be a valid number, unable to parse string as a number, got 'fast'",
        ),
    ],
)
def test_every_number_of_a_world_file_is_bounded(
    cli: Callable[..., Any], tmp_path: Path, old: str, new: str, key: str
) -> None:
    assert old in FAST_WORLD
    path = _world_file(tmp_path, FAST_WORLD.replace(old, new, 1))
    result = cli("cloud", "world", "--world", str(path))
    assert result.code == 2 and "Traceback" not in result.err
    assert key in " ".join(result.err.split()), result.err
    assert str(path) in result.err


def test_a_trace_without_polarity_names_the_yaml_values(tmp_path: Path) -> None:
    trace = shared_path(
        "traces", "cant-be-late", "availability-1node-aws-2022-10-26", "us-west-2a_v100_1.json"
    )
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / trace.name).symlink_to(
        trace
    )  # read in place, in a folder that does not tell polarity
    text = FAST_WORLD + (
        "    markets:\n      - location: us-east-1a\n        instance_type: g5.xlarge\n"
        f"        trace: traces/{trace.name}\n"
    )
    with pytest.raises(ConfigError) as refused:
        parse_world(text, "w.yaml", tmp_path).market_sources  # noqa: B018 - reading the traces is the test
    message = str(refused.value)
    assert (
        "key clouds.0.markets.0" in message
        and "'kind: unavailable_flag' or 'kind: available_count'" in message
    )
    assert "TraceKind" not in message


def test_the_readme_world_example_loads(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```yaml\n(seed: 7\n.*?)```", readme, re.S)
    assert example is not None, "the README's world-file example"
    trace = shared_path(
        "traces", "cant-be-late", "availability-1node-aws-2022-10-26", "us-west-2a_v100_1.json"
    )
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / trace.name).symlink_to(
        trace
    )  # read in place, in a folder that does not tell polarity
    world = parse_world(example.group(1), "README.md", tmp_path)
    assert world.cloud_names == ["aws-sim"] and len(world.market_sources) == 2
