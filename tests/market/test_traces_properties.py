"""Any text as a market trace (Can't Be Late JSON, Bamboo CSV and count logs): a valid trace, or
TraceError naming the file (and the line, for line formats) — never another exception, never a hang."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given

from spothop.market.errors import TraceError
from spothop.market.traces import read_trace
from tests.hostile_text import FAST_PARSER_SETTINGS, head, hostile, shared_sample, write_hostile

_CBL = shared_sample(
    "traces", "cant-be-late", "availability-1node-aws-2022-10-26", "us-west-2a_v100_1.json"
)
_COUNT = shared_sample("traces", "cant-be-late", "preemption-4node-aws-2023-08-03")


def _json_sample(path: Path, ticks: int = 24) -> str:
    doc = json.loads(path.read_text())
    return json.dumps({**doc, "data": doc["data"][:ticks]})


JSON_SAMPLES = [
    _json_sample(_CBL),
    json.dumps(
        {"metadata": {"gap_seconds": 300}, "data": [0, 2, 4, 3], "prices": [1.5, 1.6, 1.7, 1.8]}
    ),
]
BAMBOO_EVENTS = [head(shared_sample("traces", "bamboo", "p3-trace.csv").read_text(), 20)]
BAMBOO_COUNTS = [
    head(shared_sample("traces", "bamboo", "gcloud", name).read_text(), 20)
    for name in ("a100x1-east1b.txt", "v100x1-east1c.txt")
]


def _read(folder: Path, name: str, text: str) -> None:
    path = write_hostile(folder / name, text)
    try:
        trace = read_trace(path)
    except TraceError as exc:
        assert str(exc).startswith(str(path)), exc
        return
    assert len(trace) >= 1 and math.isfinite(trace.tick_s) and trace.tick_s > 0
    assert 0 <= int(trace.counts.min()) <= int(trace.counts.max()) <= trace.capacity
    if trace.prices_usd_per_hour is not None:
        assert all(math.isfinite(p) and p > 0 for p in trace.prices_usd_per_hour)


@FAST_PARSER_SETTINGS
@given(hostile(JSON_SAMPLES))
def test_any_cant_be_late_json_reads_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _read(tmp_path_factory.mktemp("x-1node-y"), "trace.json", text)


@FAST_PARSER_SETTINGS
@given(hostile(BAMBOO_EVENTS))
def test_any_bamboo_event_csv_reads_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _read(tmp_path_factory.mktemp("bamboo"), "trace.csv", text)


@FAST_PARSER_SETTINGS
@given(hostile(BAMBOO_COUNTS))
def test_any_bamboo_count_log_reads_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _read(tmp_path_factory.mktemp("gcloud"), "trace.txt", text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("events.csv", "0,add,node1\n1e300,add,node2\n"),  # once a grid of 1e295 ticks
        ("events.csv", "0,add,node1\nnan,add,node2\n"),
        ("events.csv", "0,add,node1\n\udcff,add,node2\n"),  # not UTF-8
        (
            "counts.txt",
            "2021-12-11, 11:11:30, 55\n9999-12-11, 11:11:30, 55\n",
        ),  # once an hourly grid to 9999
        (
            "counts.txt",
            "2021-12-11, 11:11:30, 55\n2099-12-11, 11:11:30, 55\n",
        ),  # a span of 78 years
        ("counts.txt", "2021-12-11, 11:11:30, 55\n2021-12-11, 11:11:31, 99999999999999999999999\n"),
        ("counts.txt", "2021-12-11, 11:11:30, 55\n\udcff\n"),
        ("x.json", '{"metadata": {"gap_seconds": 1e308}, "data": [0, 1]}'),
        ("x.json", '{"metadata": {"gap_seconds": Infinity}, "data": [0, 1]}'),
        ("x.json", '{"metadata": {"gap_seconds": 600}, "data": [0, 99999999999999999999999]}'),
        ("x.json", '{"metadata": {"gap_seconds": 600}, "data": [0, 1], "prices": ["a", 1]}'),
        ("x.json", '{"metadata": {"gap_seconds": 86400}, "data": [' + ",".join(["0"] * 400) + "]}"),
        ("x.json", "[" * 100_000),
    ],
)
def test_traces_that_once_crashed_hung_or_loaded_absurd_values_are_refused(
    tmp_path: Path, name: str, text: str
) -> None:
    folder = tmp_path / "x-1node-y"
    folder.mkdir()
    path = write_hostile(folder / name, text)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(info.value).startswith(str(path))
