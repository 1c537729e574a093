import json
from pathlib import Path

import numpy as np
import pytest

from spothop.errors import ConfigError
from spothop.market import (
    MarketId,
    MarketSource,
    SpotMarket,
    TraceError,
    TraceKind,
    read_bamboo_counts,
    read_bamboo_events,
    read_cant_be_late,
    read_trace,
)
from tests.conftest import shared_path

# folder, files, tick_s, capacity, polarity, ticks per file (known from the data README)
JSON_FOLDERS = [
    (
        "cant-be-late/availability-1node-aws-2022-10-26",
        8,
        600,
        1,
        TraceKind.UNAVAILABLE_FLAG,
        {3895},
    ),
    ("cant-be-late/preemption-1node-aws-2023-04-22", 4, 32, 1, TraceKind.UNAVAILABLE_FLAG, {19961}),
    ("cant-be-late/preemption-1node-gcp-2023-04-30", 4, 30, 1, TraceKind.UNAVAILABLE_FLAG, {5476}),
    (
        "cant-be-late/preemption-4node-aws-2023-08-03",
        3,
        300,
        4,
        TraceKind.AVAILABLE_COUNT,
        {3664, 5131},
    ),
    ("spothedge-gcp-a100", 6, 150, 4, TraceKind.AVAILABLE_COUNT, {770}),
]
# 0→1 transitions of the raw 1-node files; the README says "41–60 preemptions per zone"
AWS_2023_PREEMPTIONS = {"us-east-1c": 41, "us-east-1f": 60, "us-west-2b": 45, "us-west-2c": 58}
SIM_START = 1_700_000_000.0


def json_files(folder: str) -> list[Path]:
    return sorted(shared_path("traces", *folder.split("/")).glob("*.json"))


@pytest.mark.parametrize(("folder", "n_files", "tick_s", "capacity", "kind", "ticks"), JSON_FOLDERS)
def test_every_json_trace_reads_with_its_shape_and_polarity(
    folder, n_files, tick_s, capacity, kind, ticks
):
    files = json_files(folder)
    assert len(files) == n_files
    for path in files:
        raw = np.asarray(json.loads(path.read_text())["data"])
        trace = read_trace(path)
        assert (trace.tick_s, trace.capacity, trace.kind) == (tick_s, capacity, kind)
        assert len(trace) in ticks
        expected = 1 - raw if kind is TraceKind.UNAVAILABLE_FLAG else raw
        assert np.array_equal(trace.counts, expected), path.name


@pytest.mark.parametrize("folder", [f[0] for f in JSON_FOLDERS])
def test_replaying_through_the_market_reproduces_the_availability_fraction(folder):
    rng = np.random.default_rng(11)
    for path in json_files(folder):
        trace = read_trace(path)
        key = MarketId("aws", "region", path.stem, "x")
        source = MarketSource(trace=trace, spot_ratio=0.3, on_demand_price_usd_per_hour=3.06)
        market = SpotMarket({key: source}, sim_start=SIM_START)
        times = SIM_START + rng.uniform(0, trace.duration_s, 40_000)
        measured = np.mean([market.is_available(key, float(t)) for t in times])
        assert abs(measured - trace.availability_fraction()) < 0.01, path.name


def test_aws_2023_preemption_counts_match_the_readme():
    for path in json_files("cant-be-late/preemption-1node-aws-2023-04-22"):
        zone = path.stem.split("_")[0]
        trace = read_trace(path)
        assert trace.preemption_count() == AWS_2023_PREEMPTIONS[zone]
        assert 41 <= trace.preemption_count() <= 60
        assert len(trace.outages()) in (trace.preemption_count(), trace.preemption_count() + 1)


def test_aws_2023_traces_carry_their_spot_price():
    path = json_files("cant-be-late/preemption-1node-aws-2023-04-22")[0]  # us-east-1c
    trace = read_trace(path)
    assert trace.prices_usd_per_hour is not None
    assert trace.price_at(0) == pytest.approx(0.918)


def test_1node_polarity_known_fact():
    """us-west-2b k80_1 was mostly obtainable: 454 of 3895 ticks are 1 (= unavailable)."""
    path = shared_path(
        "traces", "cant-be-late", "availability-1node-aws-2022-10-26", "us-west-2b_k80_1.json"
    )
    assert read_trace(path).availability_fraction() == pytest.approx(3441 / 3895)


def test_kind_override_flips_the_polarity():
    path = json_files("cant-be-late/preemption-1node-aws-2023-04-22")[0]
    as_flags = read_cant_be_late(path)
    as_counts = read_cant_be_late(path, kind=TraceKind.AVAILABLE_COUNT)
    assert np.array_equal(as_counts.counts, 1 - as_flags.counts)


@pytest.mark.parametrize(("name", "capacity"), [("p3-trace.csv", 32), ("g4dn-trace.csv", 24)])
def test_bamboo_event_traces(name, capacity):
    log = read_bamboo_events(shared_path("traces", "bamboo", name))
    assert log.trace.capacity == capacity
    times = [e.time_s for e in log.events]
    assert times == sorted(times) and times[0] >= 0
    assert {e.action for e in log.events} == {"add", "remove"}
    assert 10 * 3600 < log.trace.duration_s < 12 * 3600  # "~11 h"
    assert read_trace(shared_path("traces", "bamboo", name)).capacity == capacity


@pytest.mark.parametrize("name", ["a100x1-east1b.txt", "v100x1-east1c.txt"])
def test_bamboo_count_logs(name):
    log = read_bamboo_counts(shared_path("traces", "bamboo", "gcloud", name))
    stamps = [s.timestamp for s in log.samples]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert log.trace.start_time == stamps[0] and stamps[0].year == 2021
    assert log.trace.capacity == max(s.running_count for s in log.samples)


def test_a_count_logs_later_line_wins_for_a_repeated_time(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text(
        "2021-12-10, 13:07:45, 80\n2021-12-10, 13:08:45, 80\n2021-12-10, 13:08:45, 70\n"
    )
    log = read_bamboo_counts(path, tick_s=60)
    assert [s.running_count for s in log.samples] == [80, 70]
    assert log.out_of_order_lines == 0
    assert list(log.trace.counts) == [80, 70]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ('{"metadata": {"gap_seconds": 60}, "data": {"a": 1}}', "'data'"),
        ('{"metadata": {}, "data": [0, 1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 0}, "data": [0, 1]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 60}, "data": [0, -1]}', "data[1]"),
        ('{"metadata": {"gap_seconds": 60}, "data": [0, 1], "prices": [1.0]}', "prices"),
        ("[1, 2]", "top level"),
        ("{nope", "JSON"),
    ],
)
def test_malformed_json_traces_raise_trace_errors_naming_file_and_key(tmp_path, doc, message):
    path = write(tmp_path, "x-4node-y/t.json", doc)
    with pytest.raises(TraceError, match=r"t\.json") as info:
        read_trace(path)
    assert message in str(info.value)
    assert isinstance(info.value, ConfigError)


def test_unknown_polarity_asks_for_kind(tmp_path):
    path = write(tmp_path, "mine/t.json", '{"metadata": {"gap_seconds": 60}, "data": [0, 1, 1]}')
    with pytest.raises(TraceError, match="kind="):
        read_trace(path)
    assert read_trace(
        path, kind=TraceKind.UNAVAILABLE_FLAG
    ).availability_fraction() == pytest.approx(1 / 3)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "absent.json")
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(write(tmp_path, "t.csv", "a,b,c\n1,2,3\n"))
    with pytest.raises(TraceError, match="price history"):
        read_trace(write(tmp_path, "p.json", '{"SpotPriceHistory": []}'))
    with pytest.raises(TraceError, match=r"t2.csv:2"):
        read_trace(write(tmp_path, "t2.csv", "0,add,n1\nsoon,remove,n1\n"))


def test_a_tick_keeps_the_lowest_count_seen_in_it(tmp_path):
    path = write(
        tmp_path, "e.csv", "0,add,a\n0,add,b\n30000,remove,a\n45000,add,a\n130000,remove,b\n"
    )
    log = read_bamboo_events(path, tick_s=60)
    assert list(log.trace.counts) == [1, 2, 1]  # a left for 15 s inside tick 0; b left in tick 2


@pytest.mark.parametrize(
    ("parts", "fmt"),
    [
        (("prices", "aws-spot-price-history-p2-p3-2019-2020.csv"), "aws-csv"),
        (
            ("prices", "aws-describe-spot-price-history-raw", "us-east-2", "p3.2xlarge.json"),
            "aws-json",
        ),
        (("prices", "azure-low-priority-2020", "us_east.csv"), "azure-csv"),
    ],
)
def test_a_price_history_is_not_read_as_a_trace(parts, fmt):
    with pytest.raises(
        TraceError,
        match=rf"price history \({fmt}\), not an availability trace.*spothop market import",
    ):
        read_trace(shared_path(*parts))
