"""At launch: local sources packed and stored, bucket URLs and bucket paths left to the agent;
the code route serves a job its own mounts' archives only."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.controlplane.archives import archive_path
from spothop.controlplane.mounts import plan_json, plan_mounts
from spothop.errors import JobSpecError
from spothop.jobs.launcher import agent_mounts
from spothop.jobs.spec import load_job


class Bucketed:
    """A provider whose instances share ``folder`` (SharedStorage)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def bucket_paths(self) -> list[Path]:
        return [self.folder]


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    local = tmp_path / "local"
    (local / "sub").mkdir(parents=True)
    (local / "sub" / "a.txt").write_text("a")
    (local / "skip.log").write_text("x")
    (local / ".spothopignore").write_text("*.log\n")
    bucket = tmp_path / "bucket"
    (bucket / "data").mkdir(parents=True)
    return local, bucket


def test_local_paths_are_uploaded_and_buckets_copied(tmp_path: Path) -> None:
    local, bucket = _tree(tmp_path)
    (tmp_path / "one.cfg").write_text("k=v")
    spec = load_job(
        {
            "name": "m",
            "run": "true",
            "file_mounts": {
                "up": "local",
                "/c.cfg": "one.cfg",
                "/b": str(bucket / "data"),
                "/u": "s3://x/y",
            },
        },
        base_dir=tmp_path,
    )
    home = tmp_path / "home"
    plan = plan_mounts(spec, home, {"sim": Bucketed(bucket)})
    up, cfg, in_bucket, url = plan
    assert up["dest"] == "up" and up["file"] is False and archive_path(home, up["sha256"]).is_file()
    assert cfg["file"] is True
    assert in_bucket == {"dest": "/b", "copy": str(bucket / "data")}
    assert url == {"dest": "/u", "copy": "s3://x/y"}
    sent = json.loads(agent_mounts(plan_json(plan) or "", "http://cp:1", None))
    assert sent[0]["fetch"] == f"http://cp:1/v1/agents/{{instance_id}}/code/{up['sha256']}"
    assert all("source" not in m for m in sent)  # no controller path on the node
    shared = json.loads(agent_mounts(plan_json(plan) or "", None, "/w"))
    assert shared[0] == {"dest": "/w/up", "copy": str(local)}


def test_a_mount_over_the_size_limit_is_named(tmp_path: Path) -> None:
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "blob.bin").write_bytes(b"x" * 2048)
    load_job({"name": "m", "run": "true", "file_mounts": {"/big": "big"}}, base_dir=tmp_path)
    from spothop.controlplane import archives

    with pytest.raises(JobSpecError, match=r"file_mounts '/big' is .* over the limit.*blob.bin"):
        archives.store_mount(tmp_path / "big", "file_mounts '/big'", tmp_path, max_bytes=1024)


fastapi = pytest.importorskip("fastapi")


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    yield create_app(Settings(db_url=f"sqlite:///{tmp_path}/s.db", controller=False))


def _job_with_mount(app: object, tmp_path: Path, text: str) -> tuple[str, str]:
    (tmp_path / text).mkdir()
    (tmp_path / text / "f.txt").write_text(text)
    spec = load_job(
        {"name": f"j{text}", "run": "true", "file_mounts": {"/d": text}}, base_dir=tmp_path
    )
    plan = plan_mounts(spec, tmp_path / "home", {})
    store = app.state.store  # type: ignore[attr-defined]
    return store.create_job(spec, mounts_json=plan_json(plan)), plan[0]["sha256"]


def test_an_agent_fetches_its_own_jobs_mounts_only(app: object, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    mine, my_sha = _job_with_mount(app, tmp_path, "a")
    _theirs, their_sha = _job_with_mount(app, tmp_path, "b")
    token = app.state.tokens.issue_agent_token(mine, "i-mine")  # type: ignore[attr-defined]
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(app) as client:  # type: ignore[arg-type]
        got = client.get(f"/v1/agents/i-mine/code/{my_sha}", headers=auth)
        assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == my_sha
        assert client.get(f"/v1/agents/i-mine/code/{their_sha}", headers=auth).status_code == 403
        assert client.get(f"/v1/agents/i-other/code/{my_sha}", headers=auth).status_code == 403
