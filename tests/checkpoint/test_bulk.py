"""Bulk copies and comparisons: the same answers as NumPy, whatever the split over threads."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from spothop.checkpoint import bulk
from tests.waiting import scaled

SIZES = [
    0,
    1,
    7,
    4096,
    bulk.PIECE_BYTES - 1,
    bulk.PIECE_BYTES,
    bulk.PIECE_BYTES + 3,
    3 * bulk.PIECE_BYTES + 5,
]


@pytest.fixture(params=["libc", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "numpy":
        monkeypatch.setattr(bulk, "_libc", None)
    elif bulk._libc is None:
        pytest.skip("no libc memmove/memcmp on this platform")
    monkeypatch.setattr(
        bulk, "workers", lambda: 3
    )  # more threads than this machine's cores: uneven runs
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
    flips = {
        3: 0,
        6: bulk.PIECE_BYTES + 2,
        7: 2 * bulk.PIECE_BYTES + 1,
    }  # in the first, a middle, a late piece
    for which, position in flips.items():
        second[which][position] ^= 1
    answers = bulk.equal(list(zip(first, second, strict=True)))
    assert answers == [which not in flips for which in range(len(SIZES))]


def test_equal_compares_bytes_not_floats(backend: str) -> None:
    values = np.array([0.0, np.nan, 1.5], dtype=np.float32)
    other = np.array([-0.0, np.nan, 1.5], dtype=np.float32)
    as_bytes = lambda a: a.view(np.uint8)  # noqa: E731
    assert bulk.equal(
        [(as_bytes(values), as_bytes(other)), (as_bytes(values), as_bytes(values.copy()))]
    ) == [False, True]


def test_runs_are_contiguous_and_balanced() -> None:
    sizes = [10 * bulk.PIECE_BYTES, bulk.PIECE_BYTES // 2, 5 * bulk.PIECE_BYTES]
    runs = bulk._deal(sizes, 2)
    assert [p for run in runs for p in run] == sorted(
        p for run in runs for p in run
    )  # in memory order
    loads = [sum(length for _, _, length in run) for run in runs]
    assert sum(loads) == sum(sizes) and max(loads) - min(loads) <= 2 * bulk.PIECE_BYTES


def test_bad_buffers_are_refused() -> None:
    with pytest.raises(ValueError, match="bytes"):
        bulk.copy([(np.zeros(3, np.uint8), np.zeros(4, np.uint8))])
    with pytest.raises(ValueError, match="uint8"):
        bulk.equal([(np.zeros(4, np.float32), np.zeros(4, np.float32))])
    with pytest.raises(ValueError, match="contiguous"):
        bulk.copy([(np.zeros(8, np.uint8)[::2], np.zeros(4, np.uint8))])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's pool threads do not exist in a child; work handed to that pool would never run."""
    monkeypatch.setattr(bulk, "workers", lambda: 2)
    size = 2 * bulk.PIECE_BYTES + 8  # several pieces: two runs, so the pool is used
    source = (np.arange(size) % 251).astype(np.uint8)
    bulk.copy([(np.empty_like(source), source)])  # the parent's pool now exists
    time.sleep(0.2)  # and its threads are idle: a child would count on them and start none
    pid = os.fork()
    if pid == 0:  # the child: copy through the pool, exit 0 if it worked
        target = np.empty_like(source)
        bulk.copy([(target, source)])
        os._exit(0 if np.array_equal(target, source) else 1)
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung on the parent's thread pool")
