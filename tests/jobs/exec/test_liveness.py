"""Agent liveness, the side with I/O: the heartbeats read into the facts, the boot deadline on the
controller's clock, and a lost agent's attempt ending with its console's tail (executor)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spothop.errors import ConfigError
from spothop.jobs.controller import EndAttempt, Launch
from spothop.jobs.controller.config import (
    BOOT_DEADLINE_ENV,
    HEARTBEAT_MISSES_ENV,
    config_from_env,
)
from spothop.jobs.controller.events import agent_facts
from spothop.jobs.controller.executor import CONSOLE_LINE_CHARS, CONSOLE_TAIL_LINES, Executor
from spothop.jobs.controller.observe import boot_deadlines
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.market.clock import SimClock
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import Candidate
from spothop.state.agent_tables import agent_heartbeats
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.waiting import wait_for


class WithConsole(FakeProvider):
    """A fake provider that shows a console: a boot script that failed at its last line."""

    console = "\n".join(
        [f"boot step {i}" for i in range(20)] + ["", "x" * 1000, "curl: (7) no route to host"]
    )

    def console_output(self, instance_id: str) -> str:
        self.describe(instance_id)  # InstanceNotFound for an unknown id, as the contract says
        return self.console


@pytest.fixture
def world(tmp_path: Path) -> Any:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    offerings = make_offerings()
    shows = WithConsole(markets=[make_market(o) for o in offerings], clock=ManualClock())
    blind = FakeProvider(
        name="blind", markets=[make_market(o) for o in make_offerings(provider="blind")]
    )
    providers = {shows.name: shows, blind.name: blind}
    executor = Executor(store, providers, store_url=url, home=tmp_path)
    job_id = store.create_job(load_job({"name": "t", "run": "echo hi"}))
    yield store, providers, executor, job_id
    executor.close()
    store.close()


def _launch(executor: Executor, provider: FakeProvider, job_id: str, token: str) -> Any:
    offering = provider.list_offerings()[0]
    candidate = Candidate(offering, MarketKind.SPOT, 1.0, 0.05, 100.0, 0.9, 0.0, 0.01)
    assert executor.step(Launch(job_id, 0, (candidate,), token, "launch")).ok
    wait_for(lambda: not executor.launching(), 10, what="the launch to end")
    return executor.store.attempt_by_token(token)


def test_a_lost_agents_attempt_ends_with_its_consoles_tail_bounded(world: Any) -> None:
    store, providers, executor, job_id = world
    attempt = _launch(executor, providers["fake"], job_id, "tok-1")
    why = "its agent did not register within the boot deadline (600 s)"
    end = EndAttempt(attempt.attempt_id, job_id, EndReason.AGENT_LOST, 0.0, why)
    assert executor.step(end).ok
    stored = store.attempt(attempt.attempt_id)
    assert stored.state is AttemptState.ENDED and stored.end_reason is EndReason.AGENT_LOST
    message = stored.error_message or ""
    assert message.startswith(why) and message.endswith("curl: (7) no route to host")
    tail = message.split("; console: ", 1)[1].split(" | ")
    assert len(tail) == CONSOLE_TAIL_LINES and all(len(x) <= CONSOLE_LINE_CHARS for x in tail)
    assert "boot step 0" not in message


def test_a_cloud_without_a_console_says_so(world: Any) -> None:
    store, providers, executor, job_id = world
    attempt = _launch(executor, providers["blind"], job_id, "tok-2")
    end = EndAttempt(attempt.attempt_id, job_id, EndReason.AGENT_LOST, 0.0, "heartbeats stopped")
    assert executor.step(end).ok
    assert "no console output" in (store.attempt(attempt.attempt_id).error_message or "")


def test_heartbeats_are_read_into_the_facts(world: Any) -> None:
    store, *_ = world
    with store.engine.begin() as conn:
        conn.execute(
            agent_heartbeats.insert(),
            [{"instance_id": "i-1", "time_unix_s": 1234.5, "state": "running"}],
        )
    facts = agent_facts(store, ["i-1", "i-never"])
    assert facts["i-1"].beat_at == 1234.5 and "i-never" not in facts


def test_the_boot_deadline_is_read_on_the_controllers_clock() -> None:
    real = FakeProvider(name="real")
    real.capabilities = replace(real.capabilities, boot_deadline_s=600.0)
    fast = FakeProvider(name="fast", clock=SimClock(5.0, 0.0))
    fast.capabilities = replace(fast.capabilities, boot_deadline_s=600.0)
    silent = FakeProvider(name="silent")  # declares none: its agents are not watched
    deadlines = boot_deadlines({"real": real, "fast": fast, "silent": silent})
    assert deadlines == {"real": 600.0, "fast": 120.0}


def test_the_deadlines_are_overridden_from_the_environment() -> None:
    config = config_from_env({BOOT_DEADLINE_ENV: "90", HEARTBEAT_MISSES_ENV: "4"})
    assert config is not None and config.boot_deadline_s == 90.0 and config.heartbeat_misses == 4
    assert config.heartbeat_deadline_s == 4 * config.heartbeat_interval_s
    for env, bad in ((BOOT_DEADLINE_ENV, "-1"), (HEARTBEAT_MISSES_ENV, "2.5")):
        with pytest.raises(ConfigError, match=env):
            config_from_env({env: bad})


def test_a_pass_loses_a_silent_agent_past_the_deadline_and_keeps_a_beating_one(
    tmp_path: Path,
) -> None:
    """Observe → decide → act on a virtual clock: the silent instance is terminated with its
    console's tail and its node relaunched; the one whose agent beats is kept."""
    from spothop.jobs.controller import decide
    from spothop.jobs.controller.observe import Observer

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    clock = ManualClock(1_000_000.0)
    provider = WithConsole(markets=[make_market(o) for o in make_offerings()], clock=clock)
    provider.capabilities = replace(provider.capabilities, boot_deadline_s=600.0)
    executor = Executor(store, {"fake": provider}, store_url=url, home=tmp_path)
    observer = Observer(store, {"fake": provider}, market_ttl_s=0.0, clock=clock.now)
    try:
        silent_job = store.create_job(load_job({"name": "silent", "run": "true"}))
        beating_job = store.create_job(load_job({"name": "beating", "run": "true"}))
        silent = _launch(executor, provider, silent_job, "tok-s")
        beating = _launch(executor, provider, beating_job, "tok-b")
        clock.advance(601.0)
        with store.engine.begin() as conn:
            row = {"instance_id": beating.instance_id, "time_unix_s": clock.now() - 5}
            conn.execute(agent_heartbeats.insert(), [{**row, "state": "running"}])
        actions = decide(observer.snapshot())
        assert all(r.ok for r in executor.execute(actions))
        lost = store.attempt(silent.attempt_id)
        assert lost.end_reason is EndReason.AGENT_LOST
        assert "no route to host" in (lost.error_message or "")
        assert provider.describe(silent.instance_id).state.value == "terminated"
        assert store.attempt(beating.attempt_id).live
        assert any(isinstance(a, Launch) and a.job_id == silent_job for a in actions)
    finally:
        observer.commit()
        executor.close()
        store.close()
