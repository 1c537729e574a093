"""The controller's daily live catalog refresh: once a day per real cloud, persisted, never fatal."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from spothop.errors import ConfigError
from spothop.jobs.controller.daemon import controller_dir, daily_catalog_refresh
from spothop.providers.catalog_schedule import REFRESH_INTERVAL_S, STATE_FILE, DailyRefresh
from spothop.providers.registry import members
from spothop.resources.catalog import load_catalog
from spothop.testing import FakeProvider, make_market, make_offering

DAY = REFRESH_INTERVAL_S


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _fake(spot_usd_per_hour: float) -> FakeProvider:
    offering = make_offering(
        region="fake-1", zone="fake-1a", spot_price_usd_per_hour=spot_usd_per_hour
    )
    return FakeProvider(markets=[make_market(offering)])


def _stored_spot() -> float:
    (offering,) = [o for o in load_catalog() if o.provider == "fake"]
    return offering.spot_price_usd_per_hour


def test_a_refresh_runs_once_a_day_and_a_restart_does_not_run_it_again(tmp_path: Path) -> None:
    clock, state = Clock(), tmp_path / STATE_FILE
    daily = DailyRefresh({"fake": _fake(2.0)}, state, clock=clock)
    assert daily.due() == ["fake"]
    assert daily.run_due()["fake"].ok and _stored_spot() == 2.0
    daily.providers["fake"] = _fake(3.0)
    clock.now += DAY - 1
    assert daily.run_due() == {} and _stored_spot() == 2.0  # not a day yet
    restarted = DailyRefresh({"fake": _fake(3.0)}, state, clock=clock)
    assert restarted.due() == []  # the last refresh time came from the file
    clock.now += 1
    (attempt,) = restarted.run_due().values()
    assert attempt.ok and attempt.changes == 1 and _stored_spot() == 3.0


def test_a_failure_is_logged_recorded_and_retried_the_next_day(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, state = Clock(), tmp_path / STATE_FILE
    daily = DailyRefresh({"fake": FakeProvider(markets=[])}, state, clock=clock)
    with caplog.at_level(logging.WARNING, "spothop.providers.catalog_schedule"):
        (attempt,) = daily.run_due().values()
    assert not attempt.ok and "listed no offerings" in (attempt.error or "")
    assert "catalog refresh of fake failed" in caplog.text
    clock.now += DAY / 2
    assert DailyRefresh({"fake": _fake(2.0)}, state, clock=clock).due() == []  # not at once
    clock.now += DAY / 2
    daily.providers["fake"] = _fake(2.0)
    assert daily.run_due()["fake"].ok and _stored_spot() == 2.0


def test_any_exception_of_a_provider_is_never_fatal_and_the_others_still_refresh(
    tmp_path: Path,
) -> None:
    def refresh(provider: object) -> object:
        if provider is broken:
            raise RuntimeError("price API down")
        from spothop.providers.catalog_refresh import refresh_catalog

        return refresh_catalog(provider)  # type: ignore[arg-type]

    broken = _fake(1.0)
    daily = DailyRefresh(
        {"broken": broken, "fake": _fake(2.0)},
        tmp_path / STATE_FILE,
        clock=Clock(),
        refresh=refresh,
    )
    done = daily.run_due()
    assert (done["broken"].ok, done["fake"].ok) == (False, True)
    assert done["broken"].error == "RuntimeError: price API down"


def test_poll_refreshes_in_the_background_once(tmp_path: Path) -> None:
    clock, state = Clock(), tmp_path / STATE_FILE
    daily = DailyRefresh({"fake": _fake(2.0)}, state, clock=clock)
    assert daily.poll() is True
    daily.join(timeout_s=60)
    assert state.exists() and _stored_spot() == 2.0
    assert daily.poll() is False  # done for today
    assert DailyRefresh({}, state, clock=clock).poll() is False  # nothing to refresh


def test_an_unreadable_state_file_makes_every_provider_due(tmp_path: Path) -> None:
    state = tmp_path / STATE_FILE
    state.write_text("{not json")
    daily = DailyRefresh({"fake": _fake(2.0)}, state, clock=Clock())
    assert daily.due() == ["fake"]
    assert daily.run_due()["fake"].ok and "fake" in state.read_text()


def test_the_controller_refreshes_only_its_real_clouds(spothop_home: Path) -> None:
    local = members("local")
    providers = {"fake": _fake(2.0), **{name: object() for name in local}}
    daily = daily_catalog_refresh(providers, spothop_home)
    assert list(daily.providers) == ["fake"]
    assert daily.state_path == controller_dir(spothop_home) / STATE_FILE


def test_the_refresh_interval_can_be_set_or_turned_off(
    spothop_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = {"fake": _fake(2.0)}
    monkeypatch.setenv("SPOTHOP_CATALOG_REFRESH_S", "3600")
    assert daily_catalog_refresh(providers, spothop_home).interval_s == 3600
    monkeypatch.setenv("SPOTHOP_CATALOG_REFRESH_S", "0")
    assert daily_catalog_refresh(providers, spothop_home).poll() is False  # off
    monkeypatch.setenv("SPOTHOP_CATALOG_REFRESH_S", "daily")
    with pytest.raises(ConfigError, match=r"SPOTHOP_CATALOG_REFRESH_S='daily'.*0 for none"):
        daily_catalog_refresh(providers, spothop_home)
