import pytest

from spothop.market import Clock, ManualClock, SimClock, SimClockSpec, WallClock


class FakeWall:
    """A wall clock the test moves by hand, so no test sleeps on real time."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_every_clock_is_a_clock():
    for clock in (WallClock(), ManualClock(), SimClock(10.0, 0.0)):
        assert isinstance(clock, Clock)


def test_manual_clock_advances_only_when_told():
    clock = ManualClock(100.0)
    assert clock.now() == 100.0
    clock.advance(5.5)
    clock.sleep(4.5)
    assert clock.now() == 110.0
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_sim_clock_runs_speed_times_faster():
    wall = FakeWall(1_000.0)
    clock = SimClock(60.0, sim_start=1_700_000_000.0, wall=wall, wall_sleep=wall.sleep)
    assert clock.now() == 1_700_000_000.0
    wall.now += 2.0
    assert clock.now() == 1_700_000_120.0
    clock.sleep(600.0)  # ten simulated minutes are ten real seconds
    assert wall.slept == [10.0]
    assert clock.now() == 1_700_000_720.0


def test_sim_clock_is_rebuilt_from_its_three_numbers_in_another_process():
    wall = FakeWall(5_000.0)
    parent = SimClock(100.0, sim_start=1_600_000_000.0, wall=wall)
    wall.now += 3.25
    spec = SimClockSpec.model_validate_json(parent.spec.model_dump_json())  # crosses a pipe
    child = SimClock(spec.speed, spec.sim_start, spec.wall_start, wall=wall)
    assert child.now() == parent.now() == 1_600_000_325.0


def test_sim_clock_from_spec_agrees_on_real_wall_time():
    parent = SimClock(1000.0, sim_start=0.0)
    child = SimClock.from_spec(parent.spec)
    # both read the real wall clock: they agree to within scheduling noise × speed
    assert abs(child.now() - parent.now()) < 1000.0 * 0.05


def test_sim_clock_rejects_non_positive_speed():
    with pytest.raises(ValueError):
        SimClock(0.0, 0.0)
