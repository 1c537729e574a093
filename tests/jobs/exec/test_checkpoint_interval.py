"""The checkpoint interval follows the market: the executor hands the worker λ of the market it
placed the attempt in (or the spec's fixed interval), and the worker's Checkpointer plans from it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from spothop.checkpoint.errors import CheckpointConfigError
from spothop.checkpoint.interval import (
    DEFAULT_INTERVAL_S,
    FixedInterval,
    YoungDalyInterval,
    daly_interval_s,
    interval_from_env,
)
from spothop.jobs.controller import Launch
from spothop.jobs.controller.executor import Executor
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.market import ManualClock
from spothop.testing import FakeProvider, make_market, make_offerings
from tests.jobs.exec.test_executor import _candidate
from tests.waiting import wait_for

WORKER = (
    "from spothop.checkpoint import Checkpointer\n"
    "import sys\n"
    "print(Checkpointer(sys.argv[1]).next_interval_s())\n"
)


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[tuple[JobStore, FakeProvider, Executor]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    offerings = make_offerings()
    provider = FakeProvider(markets=[make_market(o) for o in offerings], clock=ManualClock())
    ex = Executor(store, {provider.name: provider}, store_url=url, home=tmp_path)
    yield store, provider, ex
    ex.close()
    store.close()


def _worker_interval_s(env: Mapping[str, str], tmp: Path) -> float:
    """What a real worker process's Checkpointer plans under the attempt's environment."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPOTHOP_CHECKPOINT")}
    full.pop("SPOTHOP_PREEMPTION_RATE_PER_H", None)
    full.update(env)
    full["SPOTHOP_HOME"] = str(tmp)
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(tmp / "ckpt")],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def _launch_env(
    executor: Any, spec: dict[str, Any], rate_per_h: float, token: str
) -> dict[str, str]:
    store, provider, ex = executor
    job_id = store.create_job(load_job(spec))
    offering = provider.list_offerings()[0]
    candidate = dataclasses.replace(_candidate(offering), preemption_rate_per_h=rate_per_h)
    assert ex.step(Launch(job_id, 0, (candidate,), token, "first launch")).ok
    wait_for(lambda: not ex.launching(), 10, what="the launch to end")
    return dict(provider.requests[-1].env)


def test_two_markets_give_the_worker_different_intervals(executor: Any, tmp_path: Path) -> None:
    spec = {"name": "t", "run": "true", "checkpoint": {"url": str(tmp_path / "c")}}
    calm = _launch_env(executor, spec, 0.05, "tok-calm")
    busy = _launch_env(executor, spec, 2.0, "tok-busy")
    calm_s, busy_s = _worker_interval_s(calm, tmp_path), _worker_interval_s(busy, tmp_path)
    # Young/Daly with M = 1/λ and the first guess at C (30 s) until a save is measured.
    assert calm_s == pytest.approx(daly_interval_s(30.0, 3600 / 0.05))
    assert busy_s == pytest.approx(daly_interval_s(30.0, 3600 / 2.0))
    assert busy_s < calm_s


def test_a_fixed_spec_interval_wins_over_the_market(executor: Any, tmp_path: Path) -> None:
    spec = {
        "name": "t",
        "run": "true",
        "checkpoint": {"url": str(tmp_path / "c"), "interval": "5m", "save_cost_s": 4},
    }
    env = _launch_env(executor, spec, 2.0, "tok-fixed")
    assert env["SPOTHOP_CHECKPOINT_INTERVAL_S"] == "300.0"
    assert _worker_interval_s(env, tmp_path) == 300.0


def test_interval_from_env_reads_the_variables() -> None:
    assert interval_from_env({}) == FixedInterval(DEFAULT_INTERVAL_S)
    assert interval_from_env({"SPOTHOP_CHECKPOINT_INTERVAL_S": "90"}) == FixedInterval(90.0)
    policy = interval_from_env(
        {"SPOTHOP_PREEMPTION_RATE_PER_H": "0.5", "SPOTHOP_CHECKPOINT_SAVE_COST_S": "8"}
    )
    assert policy == YoungDalyInterval(mtbf_s=7200.0, initial_save_cost_s=8.0)
    assert interval_from_env({"SPOTHOP_PREEMPTION_RATE_PER_H": "0"}) == FixedInterval()
    with pytest.raises(CheckpointConfigError, match="SPOTHOP_PREEMPTION_RATE_PER_H"):
        interval_from_env({"SPOTHOP_PREEMPTION_RATE_PER_H": "often"})
