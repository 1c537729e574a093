"""A world's markets replaying published traces from the data folder, and the fallback without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from spothop.errors import ConfigError
from spothop.providers.local import world as world_module
from spothop.providers.local.runtime import spot_market
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import SHARED_DATA_ENV, load_world
from tests.conftest import PROJECT_ROOT, shared_path

TRACE = "traces/sample/preemption-1node-aws-2023-04-22/us-east-1c_v100_1.json"
SYNTHETIC = {"mean_time_between_preemptions_s": 7200, "mean_outage_s": 600, "capacity": 3}


def write_world(folder: Path, data_dir: str | None, **market: object) -> Path:
    spec: dict[str, object] = {
        "seed": 1,
        "clouds": [
            {
                "name": "aws-sim",
                "protocol": "aws",
                "catalog": "aws",
                "notice_lead_time_s": 120,
                "locations": ["us-east-1a", "us-east-1c"],
                "instance_types": ["g4dn.xlarge"],
                "market": {"synthetic": SYNTHETIC},
                "markets": [{"location": "us-east-1c", "instance_type": "g4dn.xlarge", **market}],
            }
        ],
    }
    if data_dir is not None:
        spec["data_dir"] = data_dir
    path = folder / "worlds" / "w.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec))
    return path


def write_trace(data: Path, flags: list[int], price: float | None = None) -> Path:
    """A small Can't Be Late 1-node trace (1 = no capacity that tick), written by the test."""
    path = data / TRACE
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"metadata": {"gap_seconds": 32}, "data": flags}
    if price is not None:
        doc["prices"] = [price] * len(flags)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(autouse=True)
def _no_env_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHARED_DATA_ENV, raising=False)
    monkeypatch.setattr(world_module, "_SAID", set())


def market_of(world, location: str):
    return next((k, s) for k, s in world.market_sources.items() if k.zone == location)


def test_a_replayed_market_reads_its_trace_from_the_data_folder_beside_the_world(tmp_path):
    trace = write_trace(tmp_path / "data", [0, 0, 1, 1, 0], price=0.918)
    world = load_world(write_world(tmp_path, "../data", replay=TRACE, prices="catalog"))
    key, source = market_of(world, "us-east-1c")
    assert source.trace is not None and Path(source.trace.source).resolve() == trace.resolve()
    assert list(source.trace.counts) == [1, 1, 0, 0, 1]  # 1 = unavailable, from the folder's name
    assert world.notes == []
    market = spot_market(CloudStore(tmp_path / "cloud"), world, start_s=1000.0)
    assert [market.available(key, 1000.0 + 32 * i) for i in range(5)] == [1, 1, 0, 0, 1]
    offering = world.offering("aws-sim", "us-east-1c", "g4dn.xlarge")
    assert offering is not None and offering.spot_price_usd_per_hour is not None
    # prices: catalog — a p3 trace's 0.918 $/h is not this type's price; the catalog's is.
    ratio = offering.spot_price_usd_per_hour / offering.on_demand_price_usd_per_hour
    assert market.price_usd_per_hour(key, 1000.0) == pytest.approx(
        ratio * offering.on_demand_price_usd_per_hour
    )


def test_a_traces_own_prices_are_kept_unless_the_world_says_catalog(tmp_path):
    write_trace(tmp_path / "data", [0, 0, 0], price=0.918)
    world = load_world(write_world(tmp_path, "../data", replay=TRACE))
    key, _ = market_of(world, "us-east-1c")
    market = spot_market(CloudStore(tmp_path / "cloud"), world, start_s=1000.0)
    assert market.price_usd_per_hour(key, 1000.0) == 0.918


def test_the_environment_names_the_data_folder_over_the_world_file(tmp_path, monkeypatch):
    write_trace(tmp_path / "elsewhere", [1, 0])
    monkeypatch.setenv(SHARED_DATA_ENV, str(tmp_path / "elsewhere"))
    world = load_world(write_world(tmp_path, "../no-such-folder", replay=TRACE))
    _, source = market_of(world, "us-east-1c")
    assert source.trace is not None and list(source.trace.counts) == [0, 1]


def test_without_the_data_folder_replayed_markets_run_the_clouds_market_and_say_so_once(
    tmp_path, capsys
):
    path = write_world(tmp_path, "../data", replay=TRACE)  # no data folder was written
    world = load_world(path)
    _, source = market_of(world, "us-east-1c")
    assert source.synthetic is not None and source.synthetic.capacity == 3  # the cloud's market
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is absent" in err[0] and "1 market(s)" in err[0], err
    assert SHARED_DATA_ENV in err[0] and "synthetic" in err[0]
    load_world(path)  # a second load in the same process says nothing more
    assert capsys.readouterr().err == ""


def test_a_replayed_file_missing_from_a_data_folder_that_exists_is_an_error(tmp_path):
    (tmp_path / "data").mkdir()
    world = load_world(write_world(tmp_path, "../data", replay="traces/typo.json"))
    with pytest.raises(ConfigError) as caught:
        _ = world.market_sources
    message = str(caught.value)
    assert "clouds.0.markets.0.replay" in message and "typo.json" in message
    assert "relative to the data folder" in message


def test_a_market_names_one_source(tmp_path):
    with pytest.raises(ConfigError, match="exactly one of 'trace', 'replay' or 'synthetic'"):
        load_world(write_world(tmp_path, "../data", replay=TRACE, trace="x.json"))


def test_the_demo_world_replays_the_published_traces_from_their_start_offsets():
    traces = shared_path("traces", "cant-be-late", "preemption-1node-aws-2023-04-22")
    world = load_world(PROJECT_ROOT / "examples" / "worlds" / "demo.yaml")
    assert world.notes == []
    replayed = {k.zone: s for k, s in world.market_sources.items() if s.trace is not None}
    assert set(replayed) == {"us-east-1c", "us-east-1f", "us-west-2b", "us-west-2c"}
    for zone, source in replayed.items():
        assert source.trace is not None
        assert Path(source.trace.source).resolve() == (traces / f"{zone}_v100_1.json").resolve()
        assert source.trace.preemption_count() >= 40  # the real, stormy weather
        assert source.start_offset_s is not None
        assert source.trace.available_at(source.start_offset_s) == 1  # capacity at the start
