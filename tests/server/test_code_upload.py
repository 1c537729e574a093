"""`spothop launch --server` uploads the job's code from the client's machine: the workdir and
the local file_mounts sources are packed there, sent by sha256 to a real `spothop server`, and
the server stores them and records them with the job without ever reading the client's paths
(the client's folder is gone before the launch request reaches the server). What the server
holds is not sent again; a tampered or oversized upload, a missing token, another project's
token and a launch naming an archive the project never uploaded are each refused."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spothop.cli import remote
from spothop.cli.main import main
from spothop.controlplane.archives import archive_path, store_mount, store_workdir
from spothop.jobs.store import JobStore
from tests.server.conftest import Served

RUN = "run: python train.py\nresources: {accelerators: T4}\n"


def _client_tree(root: Path) -> Path:
    """The client's job: a workdir (one file ignored), a folder and a file to mount."""
    work = root / "work"
    (work / "pkg").mkdir(parents=True)
    (work / "train.py").write_text("print('trained')\n")
    (work / "pkg" / "model.py").write_text("WEIGHTS = 3\n")
    (work / "scratch.log").write_text("not shipped\n")
    (work / ".spothopignore").write_text("*.log\n")
    (root / "data").mkdir()
    (root / "data" / "tokens.txt").write_text("a b c\n")
    (root / "app.yaml").write_text("lr: 0.1\n")
    job = root / "job.yaml"
    job.write_text(
        f"name: uploaded\nworkdir: ./work\n{RUN}"
        "file_mounts: {/data/tokens: ./data, ~/.config/app.yaml: ./app.yaml}\n"
    )
    return job


def _launch(
    capsys: pytest.CaptureFixture[str], served: Served, token: str, job: Path
) -> tuple[int, str, str]:
    argv = ["launch", str(job), "--server", served.server.url, "--token", token]
    code = main([*argv, "--detach", "--json"])
    out, err = capsys.readouterr()
    return code, out, err


def _members(path: Path) -> list[str]:
    with tarfile.open(path) as archive:
        return sorted(m.name for m in archive.getmembers())


def test_a_remote_launch_ships_the_clients_code_and_a_second_sends_nothing(
    served: Served,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, token = served.tokens.create_user("shipper", "ship-project")
    client_side = tmp_path / "client"
    job = _client_tree(client_side)
    # What the client's packer makes of it (deterministic: the same tree, the same sha256).
    mine = tmp_path / "mine"
    work_sha = store_workdir(client_side / "work", mine).sha256
    data_sha = store_mount(client_side / "data", "d", mine).sha256
    file_sha = store_mount(client_side / "app.yaml", "f", mine).sha256

    sent: list[str] = []
    launch, upload = remote.ServerClient.launch, remote.ServerClient.upload_code

    def launch_after_removing(self: Any, *args: Any, **kwargs: Any) -> Any:
        shutil.rmtree(client_side)  # the server can no longer find the client's folder
        return launch(self, *args, **kwargs)

    def counted(self: Any, sha256: str, *args: Any) -> Any:
        sent.append(sha256)
        return upload(self, sha256, *args)

    monkeypatch.setattr(remote.ServerClient, "launch", launch_after_removing)
    monkeypatch.setattr(remote.ServerClient, "upload_code", counted)

    code, out, err = _launch(capsys, served, token, job)
    assert code == 0, err
    assert not client_side.exists()
    job_id = json.loads(out)["job_id"]
    assert sorted(sent) == sorted([work_sha, data_sha, file_sha])
    assert "workdir: uploading" in err and "file_mounts '/data/tokens': uploading" in err

    record = JobStore(served.db_url).get_job(job_id)
    assert record.code_sha256 == work_sha
    assert set(record.mount_sha256s) == {data_sha, file_sha}
    stored = archive_path(served.home, work_sha)
    assert stored.read_bytes() == archive_path(mine, work_sha).read_bytes()
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == work_sha
    assert _members(stored) == [".spothopignore", "pkg", "pkg/model.py", "train.py"]
    assert _members(archive_path(served.home, file_sha)) == ["app.yaml"]
    # The job's agent gets exactly those bytes from the agents' code route.
    agent = served.tokens.issue_agent_token(job_id, "i-shipped")
    for sha in (work_sha, data_sha, file_sha):
        assert _agent_fetch(served, agent, sha) == archive_path(mine, sha).read_bytes()

    # The same code again, from a fresh copy: the server has it all, nothing is sent.
    job = _client_tree(client_side)
    sent.clear()
    code, out, err = _launch(capsys, served, token, job)
    assert code == 0, err
    assert sent == []
    assert err.count("already on the server, not sent") == 3
    again = JobStore(served.db_url).get_job(json.loads(out)["job_id"])
    assert again.code_sha256 == work_sha and again.job_id != job_id


def _agent_fetch(served: Served, token: str, sha256: str) -> bytes:
    request = urllib.request.Request(
        f"{served.server.url}/v1/agents/i-shipped/code/{sha256}",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return bytes(response.read())


def test_a_plan_through_the_server_does_not_look_for_the_clients_paths(
    served: Served, tmp_path: Path
) -> None:
    _, token = served.tokens.create_user("planner", "plan-project")
    spec = f"name: planned\nworkdir: {tmp_path / 'only-on-the-client'}\n{RUN}"
    status, answer, _ = served.server.call("POST", "/v1/plans", token=token, body={"spec": spec})
    assert status == 200, answer


def _archive(root: Path, text: str) -> tuple[str, bytes]:
    (root / "w").mkdir(parents=True, exist_ok=True)
    (root / "w" / "f.py").write_text(text)
    packed = store_workdir(root / "w", root / "h")
    return packed.sha256, packed.path.read_bytes()


def test_a_tampered_upload_is_refused_and_nothing_is_kept(served: Served, tmp_path: Path) -> None:
    _, token = served.tokens.create_user("tamperer", "tamper-project")
    sha, body = _archive(tmp_path, "print(1)\n")
    _, other = _archive(tmp_path / "o", "print(2)\n")
    status, answer, _ = served.server.call(
        "PUT",
        f"/v1/code/{sha}",
        token=token,
        raw=other,
        headers={"Content-Type": "application/gzip"},
    )
    assert status == 400 and sha in answer["error"]["message"], answer
    assert not archive_path(served.home, sha).exists()
    assert not list((served.home / "files" / "code").glob(".upload-*"))  # no leftover
    status, answer, _ = served.server.call("GET", f"/v1/code/{sha}", token=token)
    assert status == 200 and answer["held"] is False
    # A body cut short is the same refusal.
    status, answer, _ = served.server.call("PUT", f"/v1/code/{sha}", token=token, raw=body[:-10])
    assert status == 400 and not archive_path(served.home, sha).exists()
    status, answer, _ = served.server.call("PUT", f"/v1/code/{sha}", token=token, raw=body)
    assert status == 201 and answer == {"sha256": sha, "size_bytes": len(body), "stored": True}
    status, answer, _ = served.server.call("PUT", f"/v1/code/{sha}", token=token, raw=body)
    assert status == 200 and answer["stored"] is False


def test_code_needs_a_user_token_and_stays_in_its_project(served: Served, tmp_path: Path) -> None:
    _, owner = served.tokens.create_user("owner", "owning-project")
    _, stranger = served.tokens.create_user("stranger2", "other-project")
    agent = served.tokens.issue_agent_token("j-codeagnt", "i-codeagnt")
    sha, body = _archive(tmp_path, "secret = 42\n")
    for method in ("GET", "PUT"):
        status, answer, _ = served.server.call(method, f"/v1/code/{sha}", raw=body)
        assert status == 401, answer
        status, answer, _ = served.server.call(method, f"/v1/code/{sha}", token=agent, raw=body)
        assert status == 403, answer
    assert served.server.call("PUT", f"/v1/code/{sha}", token=owner, raw=body)[0] == 201

    status, answer, _ = served.server.call("GET", f"/v1/code/{sha}", token=stranger)
    assert status == 200 and answer["held"] is False  # not told that another project has it
    spec = f"name: borrowed\nworkdir: /nowhere/on/the/server\n{RUN}"
    launch = {"spec": spec, "code": {"workdir": sha}}
    status, answer, _ = served.server.call("POST", "/v1/jobs", token=stranger, body=launch)
    assert status == 422, answer
    message = answer["error"]["message"]
    assert sha in message and "PUT /v1/code/" in message and "other-project" in message

    status, answer, _ = served.server.call("POST", "/v1/jobs", token=owner, body=launch)
    assert status == 201, answer
    assert JobStore(served.db_url).get_job(answer["job_id"]).code_sha256 == sha


def test_a_launch_naming_no_archive_for_a_local_path_is_refused_unread(
    served: Served, tmp_path: Path
) -> None:
    """Even a folder the server could read is not read: the client must upload it."""
    _, token = served.tokens.create_user("lazy", "lazy-project")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "f.py").write_text("x = 'never read by the server'\n")
    sha = store_workdir(tmp_path / "w", tmp_path / "h").sha256
    spec = f"name: unread\nworkdir: {tmp_path / 'w'}\n{RUN}"
    status, answer, _ = served.server.call("POST", "/v1/jobs", token=token, body={"spec": spec})
    assert status == 422 and "code.workdir" in answer["error"]["message"], answer
    mounts = f"name: unread2\nfile_mounts: {{/d: {tmp_path / 'w'}}}\n{RUN}"
    status, answer, _ = served.server.call("POST", "/v1/jobs", token=token, body={"spec": mounts})
    assert status == 422 and "code.file_mounts" in answer["error"]["message"], answer
    assert not archive_path(served.home, sha).exists()


@pytest.fixture
def small_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The app in-process with a workdir limit of 0.01 MiB (its upload bound about 1 MiB)."""
    from fastapi.testclient import TestClient

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPOTHOP_WORKDIR_MAX_MIB", "0.01")
    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'server.db'}"))
    _, token = app.state.tokens.create_user("big", "big-project")
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


def test_an_upload_over_the_bound_is_413_with_or_without_a_length(small_server: Any) -> None:
    from spothop.server.code import upload_max_bytes

    limit = small_server.get(f"/v1/code/{'a' * 64}").json()["max_bytes"]
    assert limit == upload_max_bytes() < 2 * 1024 * 1024
    big = bytes(limit + 1)
    sha = hashlib.sha256(big).hexdigest()
    response = small_server.put(f"/v1/code/{sha}", content=big)
    assert response.status_code == 413 and str(limit) in response.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:
        stream = io.BytesIO(big)
        while block := stream.read(65536):
            yield block

    response = small_server.put(f"/v1/code/{sha}", content=chunks())  # chunked: no length
    assert response.status_code == 413, response.text
    home = Path(small_server.app.state.settings.db_url.removeprefix("sqlite:///")).parent / "home"
    assert not list((home / "files" / "code").glob("*.tar.gz"))  # nothing kept, no leftover

    # Under the bound, over the 1 MiB every other body is held to: taken.
    fits = bytes(limit - 1)
    sha = hashlib.sha256(fits).hexdigest()
    response = small_server.put(f"/v1/code/{sha}", content=chunks_of(fits))
    assert response.status_code == 201, response.text


def chunks_of(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), 65536):
        yield data[start : start + 65536]


class _SmallServer:
    """A client whose server holds nothing and takes archives of at most 100 bytes."""

    base_url = "http://server.example"

    def __init__(self) -> None:
        self.sent: list[str] = []

    def code_held(self, sha256: str) -> dict[str, Any]:
        return {"sha256": sha256, "held": False, "size_bytes": None, "max_bytes": 100}

    def upload_code(self, sha256: str, *_: Any) -> None:
        self.sent.append(sha256)


def test_an_archive_over_the_servers_bound_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    from spothop.cli.upload import upload_code
    from spothop.errors import JobSpecError
    from spothop.jobs.spec import load_job

    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "big.bin").write_bytes(bytes(range(256)) * 64)
    spec = load_job({"name": "big", "workdir": "work", "run": "true"}, base_dir=tmp_path)
    client = _SmallServer()
    with pytest.raises(JobSpecError, match=r"workdir: the archive is .* over the 100 bytes"):
        upload_code(client, spec)  # type: ignore[arg-type]
    assert client.sent == []


def test_a_large_upload_shows_a_progress_bar_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from spothop.cli import upload

    screen = io.StringIO()
    monkeypatch.setattr(upload, "err_console", Console(file=screen, force_terminal=True))
    monkeypatch.setattr(upload, "PROGRESS_MIN_BYTES", 1000)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "data.bin").write_bytes(os.urandom(20_000))  # does not shrink
    packed = store_workdir(tmp_path / "work", tmp_path / "h")
    assert packed.archive_bytes > upload.PROGRESS_MIN_BYTES

    class Client(_SmallServer):
        def code_held(self, sha256: str) -> dict[str, Any]:
            return {"held": False, "max_bytes": 10**9}

        def upload_code(self, sha256: str, path: str, progress: Any) -> None:
            self.sent.append(sha256)
            progress(Path(path).stat().st_size)

    client = Client()
    upload._send(client, "workdir", packed, quiet=False)  # type: ignore[arg-type]
    assert client.sent == [packed.sha256]
    assert (
        f"{packed.archive_bytes / 1000:.1f}/{packed.archive_bytes / 1000:.1f} kB"
        in screen.getvalue()
    )


@pytest.mark.parametrize("length", ["²", "-1", "1e3", "x", "9" * 30])
def test_a_content_length_that_is_not_a_number_is_400(small_server: Any, length: str) -> None:
    response = small_server.put(
        f"/v1/code/{'b' * 64}", content=b"abc", headers={"Content-Length": length.encode()}
    )
    assert response.status_code in (400, 413), response.text
    assert response.json()["error"]["message"]
