"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright.

A real controller runs a job on the local cloud; the page shows it running, and after an
injected preemption shows the preemption (through the server-sent event stream, no reload)
and the replacement. The screenshot goes to the test's folder, and to docs/img/dashboard.png
(the README's) when ``SPOTHOP_UPDATE_SCREENSHOT=1``.

Without chromium (or the playwright package) the test skips with the reason, unless
``SPOTHOP_REQUIRE_SERVICES=1`` (CI, where ``.ci/run`` installs chromium): then it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.dashboard.app import Dashboard
from spothop.jobs.store import JobStore
from tests.dashboard.helpers import kept_instance
from tests.jobs.e2e.conftest import WORLD, Harness, running_harness
from tests.waiting import scaled, wait_for

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
README_SHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "dashboard.png"


def _missing() -> str | None:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return "chromium is not installed (apt-get install -y chromium; .ci/run does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("SPOTHOP_REQUIRE_SERVICES") == "1":
            pytest.fail(f"SPOTHOP_REQUIRE_SERVICES=1 but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    executable = CHROMIUM if Path(CHROMIUM).exists() else str(shutil.which("chromium"))
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with running_harness(tmp_path, monkeypatch, WORLD) as h:
        yield h


def test_dashboard_shows_a_running_job_and_its_preemption(harness: Harness, browser: Any) -> None:
    h = harness
    job_id = h.launch({"name": "dashboard-demo", "run": "sleep 600"})
    first = kept_instance(h, job_id)
    app = Dashboard(JobStore(h.store_url), providers=h.providers)
    _server, base = app.start()
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(base + "/")
        row = f'tr.job[data-job="{job_id}"]'
        timeout_ms = scaled(60) * 1000
        page.wait_for_function(
            f"""() => {{
                const r = document.querySelector('{row}');
                return r && r.querySelector('td.state').textContent === 'running';
            }}""",
            timeout=timeout_ms,
        )
        assert page.text_content(f"{row} td.preemptions") == "0"
        page.wait_for_function(
            "() => document.querySelector('#stream-state').textContent === 'live'",
            timeout=timeout_ms,
        )
        refreshes = int(page.evaluate("document.body.dataset.refreshes"))

        h.preempt(first, lead_time_s=30)

        # The stream brings the notice and the replacement: the row and the timeline update.
        page.wait_for_function(
            f"() => document.querySelector('{row} td.preemptions').textContent === '1'",
            timeout=timeout_ms,
        )
        page.wait_for_function(
            """() => Number(document.querySelector('#timeline-chart').dataset.bars) >= 2
                     && document.querySelector('#timeline-chart').dataset.preemptions === '1'""",
            timeout=timeout_ms,
        )
        wait_for(
            lambda: h.running(job_id) and h.running(job_id)[0].instance_id != first.instance_id,
            90,
            what="the replacement running",
        )
        page.wait_for_function(
            f"""() => document.querySelector('{row} td.state').textContent === 'running'
                      && /running\\)/.test(document.querySelector('{row}').textContent)""",
            timeout=timeout_ms,
        )
        assert int(page.evaluate("document.body.dataset.refreshes")) > refreshes
        events = page.text_content("#events") or ""
        assert "attempt_noticed" in events or "noticed" in events, events
        shot = h.tmp / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("SPOTHOP_UPDATE_SCREENSHOT") == "1":
            README_SHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, README_SHOT)
        page.close()
    finally:
        app.stop()
