"""The restore's read path: segments read in batches (one preadv on a local file), whatever the
kernel returns per call, and the same bytes through a plain file object."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import reader as reader_mod
from spothop.checkpoint.reader import _batches, _SegmentReader

DATA = np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
SIZES = [1000, 3000, 1, 4999, 1000]  # sums to len(DATA)


def buffers() -> list[memoryview]:
    return [memoryview(bytearray(n)) for n in SIZES]


@pytest.mark.parametrize("local", [True, False])
def test_batched_reads_fill_every_buffer_in_order(tmp_path: Path, local: bool) -> None:
    path = tmp_path / "pack"
    path.write_bytes(DATA)
    with open(path, "rb") as handle:
        reader = _SegmentReader(handle, local)
        first, second = buffers()[:2], buffers()[2:]
        assert reader.read(first, 0) == 4000
        assert reader.read(second, 4000) == 6000
        assert not reader.more(len(DATA))
    assert b"".join(bytes(b) for b in (*first, *second)) == DATA


def test_short_preadv_calls_are_continued_where_they_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pack"
    path.write_bytes(DATA)
    real = os.preadv
    calls = 0

    def stingy(fd: int, views: list[memoryview], offset: int) -> int:
        nonlocal calls
        calls += 1
        total, budget = 0, 777  # a signal, a huge request: fewer bytes than asked
        for view in views:
            if not budget:
                break
            got = real(fd, [view[: min(len(view), budget)]], offset + total)
            total, budget = total + got, budget - got
        return total

    monkeypatch.setattr(reader_mod.os, "preadv", stingy)
    out = buffers()
    with open(path, "rb") as handle:
        assert _SegmentReader(handle, True).read(out, 0) == len(DATA)
    assert b"".join(bytes(b) for b in out) == DATA and calls > 10


def test_a_truncated_file_reads_short_and_a_longer_one_has_more(tmp_path: Path) -> None:
    path = tmp_path / "pack"
    path.write_bytes(DATA[:6000])
    with open(path, "rb") as handle:
        assert _SegmentReader(handle, True).read(buffers(), 0) == 6000
    path.write_bytes(DATA + b"x")
    with open(path, "rb") as handle:
        assert _SegmentReader(handle, True).more(len(DATA))


def test_batches_cover_every_segment_once_within_the_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reader_mod, "READ_BATCH_BYTES", 5000)
    monkeypatch.setattr(reader_mod, "READ_BATCH_SEGMENTS", 3)
    segments = (1000, 3000, 1, 4999, 1000, 6000, 2, 2, 2, 2)
    batches = list(_batches(segments))
    assert tuple(n for batch in batches for n in batch) == segments
    assert all(len(b) <= 3 and (sum(b) <= 5000 or len(b) == 1) for b in batches)
    assert list(_batches(())) == []
