"""One truth per figure: ``jobs``, ``status``, ``report`` and the dashboard read a job's
interruptions, node states and outputs published from one place (observe/figures.py)."""

from __future__ import annotations

from pathlib import Path

from spothop.dashboard import data as dashboard
from spothop.jobs.controller.attempt_facts import sync_attempt_facts
from spothop.jobs.controller.events import agent_facts
from spothop.jobs.controller.snapshot import AttemptView, JobView
from spothop.jobs.lifecycle import AttemptState, EndReason, JobState
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.service.jobs import job_status, list_jobs
from spothop.service.report import job_report
from spothop.wire.events import AdvanceNotice, AgentEvent, FinalNotice
from tests.service.conftest import PLACE


def _ran(store: JobStore, job_id: str, node: int, n: int, end: EndReason) -> None:
    """One attempt of ``node`` that ran 100 s at 0.5 USD/h and ended ``end``."""
    a = store.add_attempt(job_id, node, **PLACE, market_kind="spot", price_usd_per_hour=0.5)
    start = 1000.0 + 100 * n
    store.update_attempt(
        a.attempt_id, instance_id=f"i-{job_id}-{n}", state=AttemptState.RUNNING,
        running_unix_s=start,
    )  # fmt: skip
    store.update_attempt(
        a.attempt_id, state=AttemptState.ENDED, end_reason=end, ended_unix_s=start + 100
    )


def _succeed(store: JobStore, job_id: str) -> None:
    for state in (JobState.PROVISIONING, JobState.RUNNING, JobState.SUCCEEDED):
        store.transition(job_id, state, f"to_{state}")


def _batch_job(store: JobStore, tmp_path: Path, preemptions: int) -> str:
    spec = load_job(
        {
            "name": "embed",
            "kind": "batch",
            "workers": 2,
            "run": "python embed.py",
            "batch": {"inputs": ["data/*.jsonl"], "output": str(tmp_path / "out")},
        },
        base_dir=tmp_path,
    )
    job_id = store.create_job(spec)
    for n in range(preemptions):
        _ran(store, job_id, n % 2, n, EndReason.PREEMPTED)
    _ran(store, job_id, 0, preemptions, EndReason.TERMINATED)
    _ran(store, job_id, 1, preemptions + 1, EndReason.TERMINATED)
    _succeed(store, job_id)
    return job_id


def _two_node_job(store: JobStore) -> str:
    """Node 0 preempted; node 1 stopped with its group (not an interruption); both relaunched."""
    job_id = store.create_job(load_job({"name": "ddp", "run": "true", "num_nodes": 2}))
    _ran(store, job_id, 0, 0, EndReason.PREEMPTED)
    _ran(store, job_id, 1, 1, EndReason.TERMINATED)
    _ran(store, job_id, 0, 2, EndReason.SUCCEEDED)
    _ran(store, job_id, 1, 3, EndReason.SUCCEEDED)
    _succeed(store, job_id)
    return job_id


def _noticed(store: JobStore, job_id: str, n: int, notice: type[AgentEvent]) -> None:
    """An attempt whose agent reported ``notice`` (the controller's observer stores what it
    means), then ended superseded: its replacement took over first (make-before-break)."""
    a = store.add_attempt(job_id, 0, **PLACE, market_kind="spot", price_usd_per_hour=0.5)
    instance_id = f"i-{job_id}-{n}"
    start = 1000.0 + 100 * n
    store.update_attempt(
        a.attempt_id, instance_id=instance_id, state=AttemptState.RUNNING, running_unix_s=start
    )
    event = notice(instance_id=instance_id, job_id=job_id, protocol="aws", cause="spot")
    (a,) = sync_attempt_facts(store, [store.attempt(a.attempt_id)], {}, [event])
    store.update_attempt(a.attempt_id, state=AttemptState.NOTICED, noticed_unix_s=start + 50)
    store.update_attempt(
        a.attempt_id, state=AttemptState.ENDED, end_reason=EndReason.SUPERSEDED,
        ended_unix_s=start + 100,
    )  # fmt: skip


def _noticed_job(store: JobStore) -> str:
    """An advance notice alone (not an interruption), then a final notice the attempt ended
    superseded after (one), then success."""
    job_id = store.create_job(load_job({"name": "noticed", "run": "true", "max_interruptions": 1}))
    _noticed(store, job_id, 0, AdvanceNotice)
    _noticed(store, job_id, 1, FinalNotice)
    _ran(store, job_id, 0, 2, EndReason.SUCCEEDED)
    _succeed(store, job_id)
    return job_id


def _controllers_count(store: JobStore, job_id: str) -> int:
    """The interruptions ``max_interruptions`` reads: the controller's view of the stored job."""
    attempts = store.attempts(job_id)
    facts = agent_facts(store, [a.instance_id for a in attempts if a.instance_id])
    views = tuple(AttemptView.of(a, facts.get(a.instance_id or "")) for a in attempts)
    job = store.get_job(job_id)
    return JobView(job_id, job.spec(), JobState(job.state), attempts=views).interruptions


def _every_surface(store: JobStore, job_id: str) -> dict[str, object]:
    """The job's interruptions as each surface shows them, and as the controller counts them."""
    (listed,) = [j for j in list_jobs(store).to_list() if j["job_id"] == job_id]
    (board,) = [j for j in dashboard.jobs(store) if j["job_id"] == job_id]
    report = job_report(store, job_id, {}).to_dict()
    return {
        "jobs": listed["interruptions"],
        "status": job_status(store, job_id, events=False).to_dict()["interruptions"],
        "report": report["interruption_count"],
        "report by provider": sum(s["interruptions"] for s in report["by_provider"]),
        "dashboard interruptions": board["interruptions"],
        "dashboard preemptions": board["preemptions"],
        "controller (max_interruptions)": _controllers_count(store, job_id),
    }


def test_every_surface_counts_a_batch_jobs_six_preemptions(store: JobStore, tmp_path: Path) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=6)
    assert set(_every_surface(store, job_id).values()) == {6}


def test_every_surface_counts_one_interruption_of_a_two_node_job(store: JobStore) -> None:
    job_id = _two_node_job(store)
    assert set(_every_surface(store, job_id).values()) == {1}


def test_a_final_notice_counts_everywhere_and_an_advance_notice_nowhere(store: JobStore) -> None:
    job_id = _noticed_job(store)
    assert [a.notice_final for a in store.attempts(job_id)] == [False, True, False]
    assert _every_surface(store, job_id) == dict.fromkeys(_every_surface(store, job_id), 1)


def test_a_succeeded_jobs_nodes_are_done_on_every_surface(store: JobStore, tmp_path: Path) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=1)
    (listed,) = list_jobs(store).to_list()
    status = job_status(store, job_id, events=False).to_dict()
    assert [n["state"] for n in listed["nodes"]] == ["done", "done"]
    assert status["nodes"] == listed["nodes"]
    (board,) = dashboard.jobs(store)
    assert board["progress"]["done"] == board["progress"]["total"] == 2


def test_the_report_counts_the_outputs_the_workers_published(
    store: JobStore, tmp_path: Path
) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=0)
    out = tmp_path / "out"
    (out / "_tmp").mkdir(parents=True)
    for n in range(40):  # each worker published its shard's output as it completed it
        (out / f"s{n:03d}").write_bytes(b"x")
    # the controller's pass found nothing left to publish
    store.record_event(job_id, "outputs_published", {"published": 0, "losers_removed": 2})
    outputs = job_report(store, job_id, {}).to_dict()["outputs"]
    assert outputs == {"published": 40, "losers_removed": 2}


def test_a_regional_clouds_instances_are_placed_in_their_region(store: JobStore) -> None:
    job_id = store.create_job(load_job({"name": "reg", "run": "true"}))
    a = store.add_attempt(
        job_id, 0, provider="regional-sim", region="eastus", zone="", instance_type="t1",
        market_kind="spot", price_usd_per_hour=0.5,
    )  # fmt: skip
    store.update_attempt(
        a.attempt_id, instance_id="i-r", state=AttemptState.RUNNING, running_unix_s=1000.0
    )
    (board,) = dashboard.jobs(store)
    assert [i["zone"] for i in board["instances"]] == ["eastus"]
    assert [m["zone"] for m in dashboard.markets(store)] == ["eastus"]


def test_status_and_the_dashboard_read_one_spend(store: JobStore, tmp_path: Path) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=3)
    (board,) = dashboard.jobs(store)
    spend = job_status(store, job_id, events=False).to_dict()["spend_usd"]
    assert spend == round(board["cost_usd"], 6) == round(5 * 0.5 * 100 / 3600, 6)
