"""The files instances download: the wheel (no token; any other name is 404) and the job's code
(the agent's token, its own instance and its own job's archive only)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.controlplane import archives, dist
from spothop.jobs.spec import load_job

fastapi = pytest.importorskip("fastapi")


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    yield create_app(Settings(db_url=f"sqlite:///{tmp_path}/s.db", controller=False))


def _job(app: object, tmp_path: Path, text: str) -> tuple[str, str]:
    work = tmp_path / f"w-{text}"
    work.mkdir()
    (work / "main.py").write_text(text)
    code = archives.store_workdir(work, tmp_path / "home")
    spec = load_job({"name": f"j{text}", "run": "python main.py", "resources": {"cpus": 1}})
    job_id = app.state.store.create_job(spec, code_sha256=code.sha256)  # type: ignore[attr-defined]
    return job_id, code.sha256


def test_the_wheel_is_served_without_a_token_and_nothing_else_is(app: object) -> None:
    from fastapi.testclient import TestClient

    with TestClient(app) as client:  # type: ignore[arg-type]
        built = dist.distribution_for("http://x", dist_home())
        answer = client.get(built.url.removeprefix("http://x"))
        assert answer.status_code == 200
        assert hashlib.sha256(answer.content).hexdigest() == built.sha256
        assert client.get(f"/v1/dist/{built.sha256}/other-1.0-py3-none-any.whl").status_code == 404
        assert client.get(f"/v1/dist/{'0' * 64}/{built.filename}").status_code == 404
        assert client.get(f"/v1/dist/{built.sha256}/..%2Fs.db").status_code == 404
        assert client.get(f"/v1/dist/{built.filename}").status_code == 404  # by content only


def test_a_wheel_a_launch_named_is_served_after_the_code_changed(
    app: object, tmp_path: Path
) -> None:
    """An instance launched before the control plane's code changed gets the bytes its boot
    script checks: each build stays in the cache, and is served by its sha256."""
    from fastapi.testclient import TestClient

    earlier = dist_home() / "dist" / "earlier"
    earlier.mkdir(parents=True)
    filename = dist.wheel_filename()
    (earlier / filename).write_bytes(b"an earlier build")
    sha = hashlib.sha256(b"an earlier build").hexdigest()
    (earlier / f"{filename}.sha256").write_text(f"{sha}\n")
    with TestClient(app) as client:  # type: ignore[arg-type]
        answer = client.get(f"/v1/dist/{sha}/{filename}")
        assert answer.status_code == 200 and answer.content == b"an earlier build"


def dist_home() -> Path:
    from spothop.paths import spothop_home

    return spothop_home()


def test_an_agent_fetches_its_own_jobs_code_only(app: object, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    mine, my_sha = _job(app, tmp_path, "a")
    _theirs, their_sha = _job(app, tmp_path, "b")
    tokens = app.state.tokens  # type: ignore[attr-defined]
    token = tokens.issue_agent_token(mine, "i-mine")
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as client:  # type: ignore[arg-type]
        got = client.get(f"/v1/agents/i-mine/code/{my_sha}", headers=auth)
        assert got.status_code == 200
        assert hashlib.sha256(got.content).hexdigest() == my_sha
        assert client.get(f"/v1/agents/i-mine/code/{their_sha}", headers=auth).status_code == 403
        assert client.get(f"/v1/agents/i-other/code/{my_sha}", headers=auth).status_code == 403
        assert client.get(f"/v1/agents/i-mine/code/{my_sha}").status_code == 401
        assert client.get("/v1/agents/i-mine/code/nothex", headers=auth).status_code == 422
        archives.archive_path(tmp_path / "home", my_sha).unlink()
        assert client.get(f"/v1/agents/i-mine/code/{my_sha}", headers=auth).status_code == 404
