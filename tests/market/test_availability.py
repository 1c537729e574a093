import numpy as np
import pytest

from spothop.market import AvailabilityTrace


def make(counts: list[int], tick_s: float = 10.0, capacity: int | None = None) -> AvailabilityTrace:
    return AvailabilityTrace("t", tick_s, np.asarray(counts), capacity or max(max(counts), 1))


def brute_next_drop(trace: AvailabilityTrace, offset_s: float, need: int) -> float | None:
    """The first tick boundary after offset_s where availability falls below need, by scanning."""
    tick = int(offset_s // trace.tick_s)
    for p in range(tick + 1, tick + 2 * len(trace) + 1):
        before = trace.available_at((p - 1) * trace.tick_s)
        after = trace.available_at(p * trace.tick_s)
        if before >= need > after:
            return p * trace.tick_s
    return None


def test_values_at_and_between_tick_boundaries():
    trace = make([1, 0, 0, 1])
    assert [trace.available_at(x) for x in (0, 9.999, 10, 19.5, 20, 30, 39.9)] == [
        1,
        1,
        0,
        0,
        0,
        1,
        1,
    ]


def test_offsets_past_the_end_wrap_and_negative_ones_raise():
    trace = make([1, 0, 0, 1])
    assert trace.duration_s == 40
    assert (
        trace.available_at(40) == 1
        and trace.available_at(50) == 0
        and trace.available_at(4000) == 1
    )
    with pytest.raises(ValueError):
        trace.available_at(-1)


def test_counts_are_read_only_and_bounded():
    trace = make([0, 1])
    with pytest.raises(ValueError):
        trace.counts[0] = 5
    with pytest.raises(ValueError):
        AvailabilityTrace("bad", 10, np.asarray([0, 3]), capacity=2)


def test_fraction_preemptions_and_outages():
    trace = make([2, 2, 1, 0, 0, 2, 1, 2], capacity=2)
    assert trace.availability_fraction() == 6 / 8
    assert trace.availability_fraction(need=2) == 4 / 8
    assert trace.preemption_count() == 1
    assert trace.preemption_count(need=2) == 2
    assert trace.outages() == [(30.0, 20.0)]
    assert trace.outages(need=2) == [(20.0, 30.0), (60.0, 10.0)]
    assert make([0, 1, 0]).outages() == [(0.0, 10.0), (20.0, 10.0)]


def test_next_change_after_including_the_wrap():
    trace = make([1, 1, 0, 1])
    assert trace.next_change_after(0) == 20
    assert trace.next_change_after(20) == 30
    assert (
        trace.next_change_after(35) == 60
    )  # 40 wraps to tick 0 (same value 1); next change at 40+20
    assert make([1, 1]).next_change_after(5) is None
    assert make([0, 1]).next_change_after(15) == 20  # the wrap itself is a change


def test_next_available_after():
    trace = make([0, 0, 1, 0])
    assert trace.next_available_after(0) == 20
    assert trace.next_available_after(25) == 25
    assert trace.next_available_after(31) == 60
    assert make([0, 0]).next_available_after(3) is None


def test_next_drop_matches_a_brute_force_scan():
    rng = np.random.default_rng(7)
    counts = rng.choice([0, 1, 2, 3], size=300, p=[0.2, 0.1, 0.2, 0.5])
    trace = AvailabilityTrace("r", 32.0, counts, capacity=3)
    for offset in rng.uniform(0, 3 * trace.duration_s, 400):
        for need in (1, 2, 3):
            assert trace.next_drop_after(float(offset), need) == brute_next_drop(
                trace, float(offset), need
            )
    for boundary in range(0, 600, 7):  # exact tick boundaries
        assert trace.next_drop_after(boundary * 32.0) == brute_next_drop(trace, boundary * 32.0, 1)
    assert make([1, 1, 1]).next_drop_after(0) is None
