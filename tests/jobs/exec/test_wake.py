"""The controller's waker: a poke wakes a waiting loop; no listener costs nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from spothop.state.wake import Waker, poke, wake_address
from tests.waiting import wait_for


def test_a_poke_wakes_a_waiting_waker(spothop_home: Path) -> None:
    with Waker() as waker:
        assert not waker.wait(0)
        assert poke()
        assert poke()
        assert waker.wait(5)
        assert not waker.wait(0)  # every queued poke was drained


def test_a_poke_with_no_controller_listening_returns_false(spothop_home: Path) -> None:
    assert poke() is False
    assert poke("@spothop-nobody-listens-here") is False


def test_a_long_home_gets_an_abstract_address(tmp_path: Path) -> None:
    home = tmp_path / ("x" * 120)
    address = wake_address(home)
    assert address.startswith("@")
    with Waker(address) as waker:
        assert poke(address)
        assert waker.wait(5)


def test_the_environment_variable_overrides_the_address(
    spothop_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTHOP_WAKE_SOCKET", "@spothop-test-override")
    assert wake_address() == "@spothop-test-override"


def test_a_thread_waiting_is_woken_from_another(spothop_home: Path) -> None:
    woken: list[bool] = []
    with Waker() as waker:
        thread = threading.Thread(target=lambda: woken.append(waker.wait(30)))
        thread.start()
        started = time.monotonic()
        wait_for(lambda: poke() and (woken or thread.is_alive() is False), 10, what="the wake")
        thread.join()
        assert woken == [True]
        assert time.monotonic() - started < 30
