"""Readers for the published spot traces, each returning typed models.

Formats (see ``shared/data/README.md``):

- Can't Be Late / SpotHedge JSON: ``{"metadata": {"gap_seconds": G}, "data": [...]}``,
  optionally with a per-tick ``"prices"`` list. **Polarity differs by folder**: in
  the 1-node traces 1 means *unavailable/preempted* and 0 available; in the
  multi-node traces (``preemption-4node-*``, ``spothedge-*``) the integer is the
  count of instances available. :func:`read_cant_be_late` detects which from
  the folder name; pass ``kind=`` to override it.
- Bamboo fleet events: CSV ``ms_since_start,add|remove,nodeName``.
- Bamboo gcloud counts: ``YYYY-MM-DD, HH:MM:SS, running_count``.

:func:`read_trace` sniffs the format. Every reader raises :class:`TraceError`
naming the file, the key at fault and the fix, never a bare traceback.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spothop.bounds import INSTANCE_COUNT, TRACE_SPAN_S, TRACE_TICK_S, Bound, check_datetime
from spothop.errors import ValueOutOfRange
from spothop.market.availability import AvailabilityTrace, TraceKind
from spothop.market.errors import TraceError, require_file
from spothop.market.sources import claiming_price_source

DEFAULT_EVENT_TICK_S = 60.0  # Bamboo's fleet events fall on whole minutes
_NODES_IN_FOLDER = re.compile(r"(?:^|[-_])(\d+)-?node(?:$|[-_])")
_SPOTHEDGE_CAPACITY = 4  # spothedge-gcp-a100 records 0..4 obtainable (data README)


def _require_file(path: Path) -> None:
    require_file(path, "check the path (traces live under shared/data/traces)")


def _load_json(path: Path) -> Any:
    _require_file(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise TraceError(str(path), f"not valid JSON ({exc})", "pass a trace JSON file") from exc


def _bounded(where: str, bound: Bound, value: Any, field: str) -> Any:
    """``value`` within ``bound`` (spothop.bounds), else :class:`TraceError` at ``where`` (a file or file:line)."""
    try:
        return bound.check(value, field)
    except ValueOutOfRange as exc:
        raise TraceError(where, str(exc), "fix that value") from None


def detect_kind(path: Path) -> tuple[TraceKind, int] | None:
    """The polarity and capacity implied by a trace's folder names, or None if unknown."""
    for part in reversed(path.parts[:-1]):
        if part.startswith("spothedge"):
            return TraceKind.AVAILABLE_COUNT, _SPOTHEDGE_CAPACITY
        match = _NODES_IN_FOLDER.search(part)
        if match:
            nodes = int(match.group(1))
            return (
                (TraceKind.UNAVAILABLE_FLAG, 1)
                if nodes == 1
                else (TraceKind.AVAILABLE_COUNT, nodes)
            )
    return None


def _gap_seconds(path: Path, doc: dict[str, Any]) -> float:
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or "gap_seconds" not in meta:
        raise TraceError(
            str(path),
            "key 'metadata.gap_seconds' missing",
            'add "metadata": {"gap_seconds": <tick length in s>}',
        )
    return float(_bounded(str(path), TRACE_TICK_S, meta["gap_seconds"], "'metadata.gap_seconds'"))


def _int_data(path: Path, doc: dict[str, Any]) -> list[int]:
    data = doc.get("data")
    if not isinstance(data, list) or not data:
        raise TraceError(
            str(path),
            "key 'data' must be a non-empty list of integers",
            f"got {type(data).__name__}",
        )
    for i, value in enumerate(data):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TraceError(
                str(path), f"'data[{i}]' must be an integer >= 0, got {value!r}", "fix that entry"
            )
        _bounded(str(path), INSTANCE_COUNT, value, f"'data[{i}]'")
    return data


def _prices(
    path: Path, doc: dict[str, Any], ticks: int
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    prices = doc.get("prices")
    if prices is None:
        return None
    if not isinstance(prices, list) or len(prices) != ticks:
        raise TraceError(
            str(path),
            f"key 'prices' must be a list of {ticks} numbers (one per tick)",
            "fix or drop it",
        )
    try:
        array = np.asarray(prices, dtype=np.float64)
    except (ValueError, TypeError, OverflowError):
        raise TraceError(
            str(path), "key 'prices' holds something that is not a number", "fix it"
        ) from None
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise TraceError(
            str(path), "key 'prices' holds a non-positive or non-finite price", "fix it"
        )
    return array


def read_cant_be_late(
    path: str | Path, kind: TraceKind | None = None, capacity: int | None = None
) -> AvailabilityTrace:
    """Read a Can't Be Late or SpotHedge JSON trace, turning it into instance counts.

    ``kind`` defaults to what the folder name says (``*-1node-*``: 1 = unavailable;
    ``*-<n>node-*`` and ``spothedge*``: counts); a file elsewhere needs ``kind=``.
    ``capacity`` defaults to the node count in the folder name, else the largest value;
    a 1 = unavailable trace given ``capacity=n`` reads as all n or none.
    A per-tick ``prices`` list is kept as ``prices_usd_per_hour``; other
    metadata keys are kept in ``metadata``.
    """
    path = Path(path)
    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise TraceError(
            str(path),
            "top level must be an object with 'metadata' and 'data'",
            "pass a Can't Be Late trace",
        )
    tick_s = _gap_seconds(path, doc)
    data = _int_data(path, doc)
    if len(data) * tick_s > TRACE_SPAN_S.high:
        raise TraceError(
            str(path),
            f"{len(data)} ticks of {tick_s:g} s span more than {TRACE_SPAN_S.describe()}",
            "split the trace or use longer ticks",
        )
    detected = detect_kind(path)
    if kind is None:
        if detected is None:
            raise TraceError(
                str(path),
                "cannot tell the trace's polarity from its folder name",
                "pass kind=TraceKind.UNAVAILABLE_FLAG (1 = unavailable) or TraceKind.AVAILABLE_COUNT",
            )
        kind = detected[0]
    if capacity is None:
        capacity = detected[1] if detected and detected[0] == kind else max(1, max(data))
    raw = np.asarray(data, dtype=np.int64)
    if kind is TraceKind.UNAVAILABLE_FLAG:
        if raw.max() > 1:
            raise TraceError(
                str(path),
                f"a 1 = unavailable trace holds the value {raw.max()}",
                "pass kind=TraceKind.AVAILABLE_COUNT",
            )
        counts = (1 - raw) * capacity
    else:
        counts = raw
    if counts.max() > capacity:
        raise TraceError(
            str(path),
            f"'data' holds {counts.max()} but capacity is {capacity}",
            "pass a larger capacity=",
        )
    extra = {k: v for k, v in doc["metadata"].items() if k != "gap_seconds"}
    extra.update({k: v for k, v in doc.items() if k not in ("metadata", "data", "prices")})
    return AvailabilityTrace(
        name=path.stem,
        tick_s=tick_s,
        counts=counts,
        capacity=capacity,
        source=str(path),
        kind=kind,
        prices_usd_per_hour=_prices(path, doc, len(data)),
        metadata=extra,
    )


def _step_to_ticks(
    times_s: list[float], values: list[int], tick_s: float, initial: int
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Sample a step function at tick resolution, keeping each tick's *minimum*.

    ``values[k]`` holds from ``times_s[k]`` (sorted) on; ``initial`` before the
    first time. Of several values at one instant only the last counts. A node
    lost part-way through a tick makes that tick short of it, as in the Can't
    Be Late traces (1 = "preempted during that tick").
    """
    last_at = dict(zip(times_s, values, strict=True))  # the last value at each instant
    times, steps = list(last_at), list(last_at.values())
    n_ticks = int(times[-1] // tick_s) + 1 if times else 1
    ticks = np.empty(n_ticks, dtype=np.int64)
    current, j = initial, 0
    for i in range(n_ticks):
        start, end = i * tick_s, (i + 1) * tick_s
        while j < len(times) and times[j] <= start:
            current, j = steps[j], j + 1
        low = current
        while j < len(times) and times[j] < end:
            current, j = steps[j], j + 1
            low = min(low, current)
        ticks[i] = low
    return ticks


@dataclass(frozen=True)
class NodeEvent:
    """One fleet event of a Bamboo trace: a node joined or left at ``time_s``."""

    time_s: float
    action: Literal["add", "remove"]
    node: str


@dataclass(frozen=True, eq=False)
class NodeEventLog:
    """A Bamboo fleet trace: the raw events and the node count per tick."""

    events: tuple[NodeEvent, ...]
    trace: AvailabilityTrace


def _parse_event(path: Path, line: int, row: list[str]) -> NodeEvent:
    if len(row) != 3 or row[1].strip() not in ("add", "remove"):
        raise TraceError(
            f"{path}:{line}",
            f"expected 'ms_since_start,add|remove,nodeName', got {','.join(row)!r}",
            "fix that line",
        )
    try:
        ms = float(row[0])
    except ValueError:
        raise TraceError(
            f"{path}:{line}", f"time {row[0]!r} is not a number of milliseconds", "fix that line"
        ) from None
    _bounded(f"{path}:{line}", TRACE_SPAN_S, ms / 1000.0, "time since the start")
    action: Literal["add", "remove"] = "add" if row[1].strip() == "add" else "remove"
    return NodeEvent(time_s=ms / 1000.0, action=action, node=row[2].strip())


def read_bamboo_events(path: str | Path, tick_s: float = DEFAULT_EVENT_TICK_S) -> NodeEventLog:
    """Read a Bamboo ``ms_since_start,add|remove,nodeName`` CSV.

    The count is the number of distinct nodes present (an ``add`` of a present
    node or a ``remove`` of an absent one changes nothing). Tick ``i`` holds the
    fewest nodes present at any moment in ``[i·tick_s, (i+1)·tick_s)``.
    """
    path = Path(path)
    _require_file(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = [(n, row) for n, row in enumerate(csv.reader(handle), start=1) if row]
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(str(path), f"not a CSV text file ({exc})", "pass a Bamboo trace") from None
    events = sorted((_parse_event(path, n, row) for n, row in rows), key=lambda e: e.time_s)
    if not events:
        raise TraceError(str(path), "no events", "pass a non-empty Bamboo trace")
    present: set[str] = set()
    counts: list[int] = []
    for event in events:
        (present.add if event.action == "add" else present.discard)(event.node)
        counts.append(len(present))
    ticks = _step_to_ticks([e.time_s for e in events], counts, tick_s, initial=0)
    trace = AvailabilityTrace(
        name=path.stem,
        tick_s=tick_s,
        counts=ticks,
        capacity=max(counts),
        source=str(path),
    )
    return NodeEventLog(events=tuple(events), trace=trace)


@dataclass(frozen=True)
class CountSample:
    """One line of a Bamboo gcloud log: instances running at ``timestamp`` (UTC)."""

    timestamp: datetime
    running_count: int


@dataclass(frozen=True, eq=False)
class CountLog:
    """A gcloud running-count log: the samples in time order and the count per tick.

    ``out_of_order_lines`` counts lines stamped earlier than the line before
    them (the v100 log repeats each reading at +1 and +2 minutes); samples are
    sorted by time and, for equal times, the later line in the file wins.
    """

    samples: tuple[CountSample, ...]
    trace: AvailabilityTrace
    out_of_order_lines: int


def _parse_count(path: Path, line: int, text: str) -> CountSample:
    parts = [p.strip() for p in text.split(",")]
    try:
        if len(parts) != 3:
            raise ValueError("expected 3 fields")
        stamp = datetime.strptime(f"{parts[0]} {parts[1]}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
        count = int(parts[2])
        if count < 0:
            raise ValueError("negative count")
        INSTANCE_COUNT.check(count, "running_count")
        check_datetime(stamp, "the date")
    except ValueError as exc:  # ValueOutOfRange is one
        raise TraceError(
            f"{path}:{line}",
            f"expected 'YYYY-MM-DD, HH:MM:SS, running_count', got {text!r} ({exc})",
            "fix that line",
        ) from None
    return CountSample(stamp, count)


def read_bamboo_counts(path: str | Path, tick_s: float = DEFAULT_EVENT_TICK_S) -> CountLog:
    """Read a Bamboo ``YYYY-MM-DD, HH:MM:SS, running_count`` log (times taken as UTC).

    The trace starts at the first sample; each tick holds the lowest count in
    force during it; capacity is the largest count seen.
    """
    path = Path(path)
    _require_file(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise TraceError(
            str(path), f"not a text file ({exc})", "pass a running-count log"
        ) from None
    raw = [_parse_count(path, n, text) for n, text in enumerate(lines, start=1) if text.strip()]
    if not raw:
        raise TraceError(str(path), "no samples", "pass a non-empty running-count log")
    disorder = sum(1 for a, b in itertools.pairwise(raw) if b.timestamp < a.timestamp)
    latest: dict[datetime, CountSample] = {s.timestamp: s for s in raw}  # later line wins
    samples = sorted(latest.values(), key=lambda s: s.timestamp)
    start = samples[0].timestamp
    times = [(s.timestamp - start).total_seconds() for s in samples]
    if times[-1] > TRACE_SPAN_S.high:
        raise TraceError(
            str(path),
            f"the samples span {times[-1] / 86_400:.0f} days, more than {TRACE_SPAN_S.describe()}",
            "split the log",
        )
    values = [s.running_count for s in samples]
    ticks = _step_to_ticks(times, values, tick_s, initial=values[0])
    trace = AvailabilityTrace(
        name=path.stem,
        tick_s=tick_s,
        counts=ticks,
        capacity=max(max(values), 1),
        source=str(path),
        start_time=start,
    )
    return CountLog(samples=tuple(samples), trace=trace, out_of_order_lines=disorder)


def _first_line(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as handle:
        for text in handle:
            if text.strip():
                return text.strip()
    return ""


_EVENT_LINE = re.compile(r"^\d+(\.\d+)?,(add|remove),")
_COUNT_LINE = re.compile(r"^\d{4}-\d\d-\d\d,\s*\d\d:\d\d:\d\d,\s*\d+$")


def read_trace(path: str | Path, kind: TraceKind | None = None) -> AvailabilityTrace:
    """Read any supported availability trace, choosing the reader from the content."""
    path = Path(path)
    _require_file(path)
    price_format = claiming_price_source(path)
    if price_format is not None:
        raise TraceError(
            str(path),
            f"this is a price history ({price_format.name}), not an availability trace",
            "import it with `spothop market import`",
        )
    first = _first_line(path)
    if path.suffix.lower() == ".json" or first.startswith(("{", "[")):
        return read_cant_be_late(path, kind=kind)
    if _EVENT_LINE.match(first):
        return read_bamboo_events(path).trace
    if _COUNT_LINE.match(first):
        return read_bamboo_counts(path).trace
    raise TraceError(
        str(path),
        f"unknown trace format (first line {first[:60]!r})",
        "supported: Can't Be Late JSON, Bamboo 'ms,add|remove,node' CSV, Bamboo 'date, time, count' logs",
    )
