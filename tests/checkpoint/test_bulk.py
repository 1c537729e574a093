"""Bulk copies and comparisons: the same answers as NumPy, whatever the split over threads."""

from __future__ import annotations

import numpy as np
import pytest

from spothop.checkpoint import bulk

SIZES = [0, 1, 7, 4096, bulk.PIECE_BYTES - 1, bulk.PIECE_BYTES, bulk.PIECE_BYTES + 3, 3 * bulk.PIECE_BYTES + 5]


@pytest.fixture(params=["libc", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy":
        monkeypatch.setattr(bulk, "_libc", None)
    elif bulk._libc is None:
        pytest.skip("no libc memmove/memcmp on this platform")
    monkeypatch.setattr(bulk, "workers", lambda: 3)  # more threads than this machine's cores: uneven runs
    return str(request.param)


def buffers(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for size in SIZES]


def test_copy_fills_every_destination_exactly(backend: str) -> None:
    sources = buffers(1)
    # Each destination is a window of a larger array: the bytes around it must not be touched.
    outer = [np.full(len(s) + 32, 0xAB, dtype=np.uint8) for s in sources]
    destinations = [o[16:-16] for o in outer]
    bulk.copy(list(zip(destinations, sources, strict=True)))
    for source, destination, around in zip(sources, destinations, outer, strict=True):
        assert np.array_equal(source, destination)
        assert (around[:16] == 0xAB).all() and (around[-16:] == 0xAB).all()


def test_equal_finds_a_single_changed_byte_anywhere(backend: str) -> None:
    first = buffers(2)
    second = [b.copy() for b in first]
    flips = {3: 0, 6: bulk.PIECE_BYTES + 2, 7: 2 * bulk.PIECE_BYTES + 1}  # in the first, a middle, a late piece
    for which, position in flips.items():
        second[which][position] ^= 1
    answers = bulk.equal(list(zip(first, second, strict=True)))
    assert answers == [which not in flips for which in range(len(SIZES))]


def test_equal_compares_bytes_not_floats(backend: str) -> None:
    values = np.array([0.0, np.nan, 1.5], dtype=np.float32)
    other = np.array([-0.0, np.nan, 1.5], dtype=np.float32)
    as_bytes = lambda a: a.view(np.uint8)  # noqa: E731
    assert bulk.equal([(as_bytes(values), as_bytes(other)), (as_bytes(values), as_bytes(values.copy()))]) == [
        False, True]


def test_runs_are_contiguous_and_balanced() -> None:
    sizes = [10 * bulk.PIECE_BYTES, bulk.PIECE_BYTES // 2, 5 * bulk.PIECE_BYTES]
    runs = bulk._deal(sizes, 2)
    assert [p for run in runs for p in run] == sorted(p for run in runs for p in run)  # in memory order
    loads = [sum(length for _, _, length in run) for run in runs]
    assert sum(loads) == sum(sizes) and max(loads) - min(loads) <= 2 * bulk.PIECE_BYTES


def test_bad_buffers_are_refused() -> None:
    with pytest.raises(ValueError, match="bytes"):
        bulk.copy([(np.zeros(3, np.uint8), np.zeros(4, np.uint8))])
    with pytest.raises(ValueError, match="uint8"):
        bulk.equal([(np.zeros(4, np.float32), np.zeros(4, np.float32))])
    with pytest.raises(ValueError, match="contiguous"):
        bulk.copy([(np.zeros(8, np.uint8)[::2], np.zeros(4, np.uint8))])
