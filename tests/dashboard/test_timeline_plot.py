"""The timeline picture (spothop report JOB --plot): matplotlib draws one job's attempts to a PNG."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from spothop.cli.main import main
from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.observe.timeline import job_timeline, plot_timeline
from tests.jobs.e2e.conftest import WORLD


def test_plot_timeline_writes_a_png(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'store.db'}")
    job_id = store.create_job(load_job({"name": "drawn", "run": "true"}))
    for provider, end in (("p1", EndReason.PREEMPTED), ("p2", None)):
        a = store.add_attempt(
            job_id,
            0,
            provider=provider,
            region="r",
            zone="z",
            instance_type="t",
            market_kind="spot",
            price_usd_per_hour=1.0,
        )
        store.update_attempt(a.attempt_id, state=AttemptState.RUNNING)
        if end is not None:
            store.update_attempt(a.attempt_id, state=AttemptState.ENDED, end_reason=end)
    bars = job_timeline(store, job_id)
    assert [b.preempted for b in bars] == [True, False]
    out = plot_timeline(bars, tmp_path / "plots" / "t.png", title=job_id)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_plot_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = tmp_path / "world.yaml"
    world.write_text(yaml.safe_dump(WORLD))
    monkeypatch.setenv("SPOTHOP_WORLD", str(world))
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = JobStore(url)
    job_id = store.create_job(load_job({"name": "drawn", "run": "true"}))
    a = store.add_attempt(
        job_id,
        0,
        provider="aws-sim",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="g5.xlarge",
        market_kind="spot",
        price_usd_per_hour=1.0,
    )
    store.update_attempt(a.attempt_id, state=AttemptState.RUNNING)
    out = tmp_path / "timeline.png"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", job_id, "--store", url, "--json", "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", "--store", url, "--plot", str(out)]) == 2
