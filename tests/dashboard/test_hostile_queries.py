"""The standalone dashboard's endpoints under hostile query strings and ids: a 4xx (or the answer),
never a 5xx or a traceback. The same endpoints served inside the API server are swept in
tests/server/test_hostile_routes.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spothop.dashboard.app import Dashboard, resume_point
from spothop.errors import ConfigError
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore

ENDPOINTS = ("/api/jobs", "/api/events", "/api/cost", "/api/markets", "/api/timeline", "/api/nope")
ODD_VALUES = (
    "9" * 40,
    "-" + "9" * 40,
    "9" * 5000,
    "²",
    "١٢",
    "NaN",
    "1e308",
    "-1",
    "",
    "..",
    "../../etc/passwd",
    "\x00",
    "ｊ-实例-🚀",
    "j" * 5000,
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder: Path = tmp_path_factory.mktemp("dash")
    store = JobStore(f"sqlite:///{folder / 'store.db'}")
    store.create_job(load_job({"name": "shown", "run": "sleep 600"}))
    app = Dashboard(store)
    _server, url = app.start()
    try:
        yield url
    finally:
        app.stop()
        store.close()


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def assert_answered(status: int, text: str) -> None:
    assert status < 500, (status, text[:300])
    assert "Traceback" not in text
    if status >= 400:
        assert "\n" not in text.strip() and json.loads(text)["error"], text[:300]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("value", ODD_VALUES, ids=range(len(ODD_VALUES)))
def test_an_odd_query_value_is_answered_without_a_server_error(
    endpoint: str, value: str, base: str
) -> None:
    for name in ("after", "job"):
        query = urllib.parse.urlencode({name: value})
        assert_answered(*fetch(f"{base}{endpoint}?{query}"))


@pytest.mark.parametrize("value", ODD_VALUES, ids=range(len(ODD_VALUES)))
def test_an_odd_static_or_page_path_is_not_found(value: str, base: str) -> None:
    quoted = urllib.parse.quote(value, safe="")
    for path in (f"/static/{quoted}", f"/{quoted}", f"/api/{quoted}"):
        status, text = fetch(base + path)
        assert_answered(status, text)


@given(raw=st.text(max_size=60))
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_a_resume_point_is_a_bounded_whole_number_or_refused(raw: str) -> None:
    try:
        after = resume_point(raw)
    except ConfigError as exc:
        assert "\n" not in str(exc) and "after" in str(exc)
    else:
        assert 0 <= after < 2**63


@pytest.mark.parametrize("raw", ["²", "9" * 40, "-1", "1e308", "abc", "9" * 5000])
def test_an_odd_resume_point_is_refused_with_the_bounds(raw: str) -> None:
    with pytest.raises(ConfigError, match="after must be a whole number"):
        resume_point(raw)
