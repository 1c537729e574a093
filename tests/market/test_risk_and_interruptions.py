"""Rising-risk events and spothop's own interruption history."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spothop.db import make_engine
from spothop.errors import ValueOutOfRange
from spothop.market import (
    AvailabilityTrace,
    Interruption,
    InterruptionStore,
    MarketId,
    RisingRiskEvent,
    RiskMonitor,
    mean_time_between_preemptions_s,
    record_interruption,
    rising_risk_events,
    risk_windows,
)
from spothop.market.reliability import DEFAULT_PRIOR, DEFAULT_PRIOR_RATE_PER_H

M = MarketId("aws", "us-east-1", "us-east-1a", "p3.2xlarge")
DAY = 86400.0


def test_three_consecutive_rises_fire_once_per_run() -> None:
    heard: list[RisingRiskEvent] = []
    monitor = RiskMonitor()
    monitor.subscribe(heard.append)
    risks = [0.20, 0.25, 0.31, 0.40, 0.45, 0.30, 0.35, 0.40, 0.50]
    events = rising_risk_events(M, list(enumerate(map(float, risks))), monitor)
    assert [e.at for e in events] == [
        3.0,
        8.0,
    ]  # 0.40 ends the first run; 0.50 the run after the dip
    assert events[0].risks == (0.20, 0.25, 0.31, 0.40) and heard == events


def test_two_rises_or_tiny_rises_do_not_fire() -> None:
    assert rising_risk_events(M, [(0, 0.2), (1, 0.3), (2, 0.4), (3, 0.35)]) == []
    assert rising_risk_events(M, [(0, 0.2), (1, 0.201), (2, 0.202), (3, 0.203)]) == []


def test_a_market_turning_stormy_raises_an_event_from_its_trace() -> None:
    calm = np.ones(7 * 144, dtype=np.int64)  # a week at 600 s ticks, never preempted
    stormy = np.tile([1] * 6 + [0] * 6, 4 * 12)  # then four days losing it every two hours
    trace = AvailabilityTrace("turning", 600.0, np.concatenate([calm, stormy]), capacity=1)
    windows = risk_windows(trace, M, "V100", DEFAULT_PRIOR)
    events = rising_risk_events(M, windows)
    assert len(events) == 1 and events[0].at == pytest.approx(10 * DAY)  # the third stormy day
    assert all(
        later > earlier
        for earlier, later in zip(events[0].risks, events[0].risks[1:], strict=False)
    )


def test_interruptions_and_runs_give_a_rate(tmp_path: Path) -> None:
    store = InterruptionStore(engine=make_engine(f"sqlite:///{tmp_path}/i.db"))
    now = 1_700_000_000.0
    for k in range(4):  # four instances, 25 h each, all preempted, inside the window
        start = now - DAY * 4 + k * 3600
        store.record_run(M, start, start + 25 * 3600, instance_id=f"i-{k}")
        store.record_interruption(
            Interruption(
                M,
                "instance-action",
                120.0,
                start + 25 * 3600,
                cause="capacity",
                instance_id=f"i-{k}",
            )
        )
    store.record_interruption(Interruption(M, "none", None, now - 30 * DAY))  # too old
    (evidence,) = store.evidence(now, lambda m: "V100")
    assert (evidence.preemptions, evidence.instance_hours) == (4, pytest.approx(100.0))
    assert store.interruptions()[-1] == Interruption(
        M,
        "instance-action",
        120.0,
        now - DAY * 4 + 3 * 3600 + 25 * 3600,
        cause="capacity",
        instance_id="i-3",
    )


@pytest.mark.parametrize(
    ("lead_time_s", "time_unix_s", "field"),
    [
        (-1.0, 1_700_000_000.0, "lead_time_s"),
        (float("nan"), 1_700_000_000.0, "lead_time_s"),
        (120.0, 1_000.0, "time_unix_s"),  # seconds since boot, not unix time
        (120.0, float("inf"), "time_unix_s"),
    ],
)
def test_an_interruption_with_an_impossible_time_is_refused(
    lead_time_s: float, time_unix_s: float, field: str
) -> None:
    with pytest.raises(ValueOutOfRange, match=field):
        Interruption(M, "instance-action", lead_time_s, time_unix_s)


def test_a_regional_interruption_is_stored_with_the_empty_zone(tmp_path: Path) -> None:
    store = InterruptionStore(engine=make_engine(f"sqlite:///{tmp_path}/i.db"))
    regional = MarketId("azure", "eastus", "", "Standard_NC6s_v3")
    store.record_interruption(Interruption(regional, "Preempt", 30.0, 1_700_000_000.0))
    store.record_run(regional, 1_699_990_000.0, 1_700_000_000.0)
    (evidence,) = store.evidence(1_700_000_000.0, lambda m: "V100")
    assert evidence.market == regional and evidence.preemptions == 1


def test_default_store_functions_round_trip() -> None:
    # no history: the default prior answers (SPOTHOP_HOME is isolated per test)
    assert mean_time_between_preemptions_s(M, now_unix_s=1_700_000_000.0) == pytest.approx(
        3600 / DEFAULT_PRIOR_RATE_PER_H
    )
    record_interruption(Interruption(M, "instance-action", 120.0, 1_699_999_000.0))
    shorter = mean_time_between_preemptions_s(M, now_unix_s=1_700_000_000.0)
    assert shorter < 3600 / DEFAULT_PRIOR_RATE_PER_H  # one preemption, no exposure: the rate rises
