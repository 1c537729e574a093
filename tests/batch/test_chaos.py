"""Workers SIGKILLed at random and restarted: every shard committed exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.batch.chaos import run_chaos
from tests.waiting import scaled

TIMEOUT_S = scaled(120.0)


def test_chaos_reduced(tmp_path: Path) -> None:
    report = run_chaos(
        f"sqlite:///{tmp_path / 'q.db'}",
        tmp_path,
        shards=400,
        workers=4,
        kill_every_s=(0.3, 0.8),
        lease_s=1.0,
        work_s=0.02,
        seed=4,
        timeout_s=TIMEOUT_S,
    )
    assert report.kills > 0, "no worker was killed: the test tested nothing"
    assert report.as_dict() | {"exact": True} == report.as_dict()
    assert (report.done, report.dead, report.committed_twice) == (400, 0, 0)
    assert (report.missing_outputs, report.wrong_outputs, report.temporaries_left) == (0, 0, 0)


@pytest.mark.slow  # minutes: -m slow (or bench/chaos.py)
def test_chaos_full(tmp_path: Path) -> None:
    report = run_chaos(
        f"sqlite:///{tmp_path / 'q.db'}",
        tmp_path,
        shards=10_000,
        workers=8,
        kill_every_s=(1.0, 3.0),
        lease_s=2.0,
        work_s=0.01,
        seed=10,
        timeout_s=1800,
    )
    assert report.kills > 0
    assert report.exact, report.as_dict()
