from __future__ import annotations

import threading
import time

import pytest

from spothop.providers.local.metadata import NoticeState, ScheduledEvent
from spothop.providers.local.metadata.state import (
    MAINTENANCE_MIGRATE,
    MAINTENANCE_NONE,
    MAINTENANCE_TERMINATE,
)
from tests.providers.local.metadata.conftest import T0, ManualClock
from tests.waiting import scaled


def test_fresh_state_has_no_notices() -> None:
    state = NoticeState(ManualClock())
    snap = state.snapshot()
    assert (snap.advance_notice_time, snap.termination_time, snap.notice_time) == (None, None, None)
    assert snap.maintenance_event == MAINTENANCE_NONE
    assert (snap.document_incarnation, snap.event_id, snap.acknowledged) == (0, None, False)
    assert not snap.preempted
    assert snap.now == T0


def test_rebalance_recommendation_is_recorded_once() -> None:
    clock = ManualClock()
    state = NoticeState(clock)
    state.recommend_rebalance()
    assert state.advance_notice_time == T0
    version = state.version
    clock.advance(10)
    state.recommend_rebalance(T0 + 10)
    assert state.advance_notice_time == T0
    assert state.version == version


def test_schedule_termination_records_notice_and_event() -> None:
    state = NoticeState(ManualClock())
    event_id = state.schedule_termination(T0, T0 + 120)
    assert (state.notice_time, state.termination_time) == (T0, T0 + 120)
    assert state.event_id == event_id
    assert state.document_incarnation == 1
    assert state.snapshot().preempted
    # The same notice again changes nothing.
    version = state.version
    assert state.schedule_termination(T0, T0 + 120) == event_id
    assert (state.version, state.document_incarnation) == (version, 1)
    # A moved termination is a new document, same event.
    assert state.schedule_termination(T0, T0 + 60) == event_id
    assert state.document_incarnation == 2


def test_schedule_termination_defaults_notice_to_now_and_rejects_reversed_times() -> None:
    clock = ManualClock()
    state = NoticeState(clock)
    with pytest.raises(ValueError, match="before notice_at"):
        state.schedule_termination(T0, T0 - 1)
    clock.advance(5)
    state.schedule_termination(None, T0 + 35)
    assert state.notice_time == T0 + 5


def test_maintenance_event_values() -> None:
    state = NoticeState(ManualClock())
    for value in (MAINTENANCE_TERMINATE, MAINTENANCE_MIGRATE, MAINTENANCE_NONE):
        state.set_maintenance(value)
        assert state.maintenance_event == value
    with pytest.raises(ValueError, match="TERMINATE_ON_HOST_MAINTENANCE"):
        state.set_maintenance("REBOOT")


def test_acknowledge_only_the_current_event() -> None:
    clock = ManualClock()
    state = NoticeState(clock)
    assert not state.acknowledge("anything")  # no event yet
    event_id = state.schedule_termination(T0, T0 + 30)
    assert not state.acknowledge("00000000-0000-0000-0000-000000000000")
    assert not state.acknowledged
    clock.advance(3)
    assert state.acknowledge(event_id.lower())  # GUIDs compare case-insensitively
    assert state.acknowledged and state.acknowledged_at == T0 + 3
    assert state.document_incarnation == 2
    clock.advance(3)
    assert state.acknowledge(event_id)  # idempotent: keeps the first time
    assert state.acknowledged_at == T0 + 3
    assert state.document_incarnation == 2


def test_wait_for_change_wakes_on_a_change_from_another_thread() -> None:
    state = NoticeState(ManualClock())
    version = state.version
    result: list[int] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        result.append(state.wait_for_change(version, scaled(10.0)))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert started.wait(scaled(5.0))
    begun = time.monotonic()
    state.recommend_rebalance()
    thread.join(scaled(5.0))
    assert result == [version + 1]
    assert time.monotonic() - begun < scaled(5.0)  # woken, not timed out


def test_wait_for_change_times_out_and_returns_at_once_if_already_changed() -> None:
    state = NoticeState(ManualClock())
    begun = time.monotonic()
    assert state.wait_for_change(state.version, 0.05) == 0
    assert time.monotonic() - begun >= 0.04
    state.set_maintenance(MAINTENANCE_TERMINATE)
    assert state.wait_for_change(0, 5.0) == 1  # no wait: the version already moved


def test_scheduled_events_are_replaced_as_a_whole_and_only_a_change_bumps_the_version() -> None:
    state = NoticeState(clock=lambda: 1000.0)
    event = ScheduledEvent("instance-event-1", "instance-stop", 1600.0, 5200.0)
    state.set_scheduled_events([event])
    version = state.version
    assert state.snapshot().scheduled_events == (event,) and version == 1
    state.set_scheduled_events([event])
    assert state.version == version
    canceled = ScheduledEvent("instance-event-1", "instance-stop", 1600.0, 5200.0, state="canceled")
    state.set_scheduled_events([canceled])
    assert state.version == version + 1 and state.scheduled_events == (canceled,)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"code": ""}, "needs a code"),
        ({"state": "pending"}, "not one of"),
        ({"not_after": 1000.0}, "before not_before"),
    ],
)
def test_a_malformed_scheduled_event_is_refused(fields: dict[str, object], message: str) -> None:
    values: dict[str, object] = {
        "event_id": "instance-event-1",
        "code": "instance-stop",
        "not_before": 1600.0,
        "not_after": 5200.0,
        **fields,
    }
    with pytest.raises(ValueError, match=message):
        ScheduledEvent(**values)  # type: ignore[arg-type]


def test_a_snapshot_shows_every_time_on_the_instance_clock() -> None:
    # A 30x world: the cloud's T0 + 30 s is one wall second after the wall's W0.
    wall0 = 1_000.0
    state = NoticeState(ManualClock(), instance_time=lambda t: wall0 + (t - T0) / 30)
    state.recommend_rebalance(T0 + 30)
    state.schedule_termination(T0 + 60, T0 + 180)
    state.set_scheduled_events(
        [ScheduledEvent("e-1", "instance-stop", not_before=T0 + 300, not_after=T0 + 600)]
    )
    snap = state.snapshot()
    assert snap.now == wall0
    assert (snap.advance_notice_time, snap.notice_time, snap.termination_time) == (1001, 1002, 1006)
    (event,) = snap.scheduled_events
    assert (event.not_before, event.not_after) == (1010, 1020)
    # The state itself keeps the cloud's times: the host plans on them.
    assert state.termination_time == T0 + 180
