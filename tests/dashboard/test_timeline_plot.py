"""The timeline picture (spothop report JOB --plot): matplotlib draws one job's attempts to a PNG."""

from __future__ import annotations

from pathlib import Path

from spothop.jobs.lifecycle import AttemptState, EndReason
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.observe.timeline import job_timeline, plot_timeline


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
