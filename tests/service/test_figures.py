"""One truth per figure: ``jobs``, ``status``, ``launch``'s live view, ``report`` (text and JSON),
the dashboard, the server's API and Prometheus read a job's interruptions, node states, spend and
outputs published from one place (observe/figures.py); each surface is read as a user reads it
(the text a command prints, the JSON a route answers, the metrics a scrape gets)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spothop.cli.jobs import _progress
from spothop.cli.report import _show
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


class Api:
    """The server's user API and /metrics over the test's store, as a client reads them."""

    def __init__(self, store: JobStore, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from fastapi.testclient import TestClient

        from spothop.server.app import create_app
        from spothop.server.settings import Settings

        monkeypatch.setenv("SPOTHOP_HOME", str(home))
        self.app = create_app(Settings(db_url=str(store.engine.url)))
        _, token = self.app.state.tokens.create_user("u", "p")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.client = TestClient(self.app)
        self.assigned: set[str] = set()

    def _assign(self, job_id: str) -> None:
        """The job in the user's project (a job launched through the server is put there)."""
        if job_id not in self.assigned:
            self.app.state.tokens.assign_job(job_id, "p")
            self.assigned.add(job_id)

    def get(self, job_id: str, route: str = "") -> Any:
        self._assign(job_id)
        answer = self.client.get(f"/v1/jobs/{job_id}{route}", headers=self.headers)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def listed(self, job_id: str) -> dict[str, Any]:
        self._assign(job_id)
        answer = self.client.get("/v1/jobs", headers=self.headers)
        (job,) = [j for j in answer.json()["jobs"] if j["job_id"] == job_id]
        return dict(job)

    def metrics(self) -> str:
        return str(self.client.get("/metrics").text)


@pytest.fixture
def api(store: JobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    yield Api(store, tmp_path / "server-home", monkeypatch)


def _printed(renderable_or_show: Any, data: dict[str, Any] | None = None) -> str:
    """What a terminal 200 columns wide shows: a renderable, or what ``_show(data)`` prints."""
    console = Console(record=True, width=200, file=io.StringIO())
    if data is None:
        console.print(renderable_or_show)
    else:
        import spothop.cli.report as report_cli

        saved = report_cli.console
        report_cli.console = console
        try:
            renderable_or_show(data)
        finally:
            report_cli.console = saved
    return " ".join(console.export_text().split())


def _number_after(text: str, label: str) -> int:
    found = re.search(re.escape(label) + r"\D*?(\d+)", text)
    assert found is not None, (label, text[:500])
    return int(found.group(1))


def _preemptions_scraped(metrics: str) -> int:
    """The sum of ``spothop_preemptions_total`` over its labels (one job per store here)."""
    values = re.findall(r"^spothop_preemptions_total\{[^}]*\} (\S+)$", metrics, re.M)
    return int(sum(float(v) for v in values))


def _every_surface(store: JobStore, job_id: str, api: Api) -> dict[str, object]:
    """The job's interruptions as each surface shows them, and as the controller counts them."""
    (listed,) = [j for j in list_jobs(store).to_list() if j["job_id"] == job_id]
    (board,) = [j for j in dashboard.jobs(store) if j["job_id"] == job_id]
    status = job_status(store, job_id, events=False).to_dict()
    report = job_report(store, job_id, {}).to_dict()
    report_text = _printed(_show, report)
    served_report = api.get(job_id, "/report")
    return {
        "jobs": listed["interruptions"],
        "status": status["interruptions"],
        "launch's live view": _number_after(_printed(_progress(status)), "preemptions:"),
        "report": report["interruption_count"],
        "report by provider": sum(s["interruptions"] for s in report["by_provider"]),
        "report text": _number_after(report_text, "interruptions survived"),
        "dashboard interruptions": board["interruptions"],
        "dashboard preemptions": board["preemptions"],
        "server GET /v1/jobs": api.listed(job_id)["interruptions"],
        "server GET /v1/jobs/ID": api.get(job_id)["interruptions"],
        "server GET /v1/jobs/ID/report": served_report["interruption_count"],
        "server report by provider": sum(s["interruptions"] for s in served_report["by_provider"]),
        "Prometheus spothop_preemptions_total": _preemptions_scraped(api.metrics()),
        "controller (max_interruptions)": _controllers_count(store, job_id),
    }


def test_every_surface_counts_a_batch_jobs_six_preemptions(
    store: JobStore, tmp_path: Path, api: Api
) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=6)
    seen = _every_surface(store, job_id, api)
    assert seen == dict.fromkeys(seen, 6)


def test_every_surface_counts_one_interruption_of_a_two_node_job(store: JobStore, api: Api) -> None:
    job_id = _two_node_job(store)
    seen = _every_surface(store, job_id, api)
    assert seen == dict.fromkeys(seen, 1)


def test_a_final_notice_counts_everywhere_and_an_advance_notice_nowhere(
    store: JobStore, api: Api
) -> None:
    job_id = _noticed_job(store)
    assert [a.notice_final for a in store.attempts(job_id)] == [False, True, False]
    seen = _every_surface(store, job_id, api)
    assert seen == dict.fromkeys(seen, 1)


@pytest.mark.parametrize("kind", ["batch", "two-node"])
def test_a_succeeded_jobs_nodes_are_done_on_every_surface(
    store: JobStore, tmp_path: Path, api: Api, kind: str
) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=1) if kind == "batch" else _two_node_job(store)
    (listed,) = list_jobs(store).to_list()
    status = job_status(store, job_id, events=False).to_dict()
    assert [n["state"] for n in listed["nodes"]] == ["done", "done"]
    assert status["nodes"] == listed["nodes"] == api.get(job_id)["nodes"]
    assert api.listed(job_id)["nodes"] == listed["nodes"]
    (board,) = dashboard.jobs(store)
    assert board["progress"]["done"] == board["progress"]["total"] == 2


def test_the_report_counts_the_outputs_the_workers_published(
    store: JobStore, tmp_path: Path, api: Api
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
    assert api.get(job_id, "/report")["outputs"] == outputs


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


@pytest.mark.parametrize("kind", ["batch", "two-node"])
def test_status_launch_the_dashboard_and_the_api_read_one_spend(
    store: JobStore, tmp_path: Path, api: Api, kind: str
) -> None:
    job_id = _batch_job(store, tmp_path, preemptions=3) if kind == "batch" else _two_node_job(store)
    (board,) = dashboard.jobs(store)
    status = job_status(store, job_id, events=False).to_dict()
    spend = status["spend_usd"]
    attempts = 5 if kind == "batch" else 4  # each ran 100 s at 0.5 USD/h
    assert spend == round(board["cost_usd"], 6) == round(attempts * 0.5 * 100 / 3600, 6)
    assert api.get(job_id)["spend_usd"] == spend
    assert f"spend so far ≈ ${spend:.4f}" in _printed(_progress(status))
