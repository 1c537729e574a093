"""Replicas of the server share only their database: code uploaded through one is served by any.

Two apps, each with its own home, over one store (SQLite, and PostgreSQL where the tests have
it): an archive uploaded to replica A is held for its project on replica B, a job launched on
B names it, and B serves B's agents the exact bytes, writing its own cache from the store. A
damaged archive in the store is an error naming it, never other bytes; uploading again writes
nothing twice; an archive larger than a chunk is kept as several.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update

from spothop.controlplane.archives import archive_path, code_dir
from spothop.state import code_archives
from spothop.state.code_archives import CodeArchiveDamaged, CodeArchives
from spothop.state.code_tables import code_archive_chunks as chunks_t
from tests.jobs.test_replicas import schema_url

SPEC = "name: replicated\nworkdir: /only/on/the/client\nrun: python train.py\n"
CHUNK = 64 * 1024  # small chunks, so that a test's archive spans several


@dataclass
class Replica:
    """One server app and its own home; every call is made with its home in the environment."""

    client: Any
    home: Path
    monkeypatch: pytest.MonkeyPatch

    def call(self, method: str, path: str, token: str, body: bytes | None = None) -> Any:
        self.monkeypatch.setenv("SPOTHOP_HOME", str(self.home))
        headers = {"Authorization": f"Bearer {token}"}
        return self.client.request(method, path, content=body, headers=headers)

    def launch(self, token: str, sha256: str) -> str:
        self.monkeypatch.setenv("SPOTHOP_HOME", str(self.home))
        body = {"spec": SPEC, "code": {"workdir": sha256}}
        answer = self.client.post(
            "/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["job_id"])

    @property
    def store(self) -> CodeArchives:
        found: CodeArchives = self.client.app.state.code_archives
        return found


@pytest.fixture(params=["sqlite", "postgresql"])
def replicas(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Replica, Replica]]:
    """Replicas A and B of one store, each with its own home."""
    from fastapi.testclient import TestClient

    from spothop.server.app import create_app
    from spothop.server.settings import Settings

    if request.param == "postgresql":
        db_url = schema_url(request.getfixturevalue("pg_schema"))
    else:
        db_url = f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.setattr(code_archives, "CHUNK_BYTES", CHUNK)
    pair = []
    for name in ("a", "b"):
        home = tmp_path / f"home-{name}"
        monkeypatch.setenv("SPOTHOP_HOME", str(home))
        app = create_app(Settings(db_url=db_url, controller=False))
        pair.append((TestClient(app), home))
    with pair[0][0] as a, pair[1][0] as b:
        yield Replica(a, pair[0][1], monkeypatch), Replica(b, pair[1][1], monkeypatch)


def _archive(size: int = 3 * CHUNK + 123) -> tuple[str, bytes]:
    """Bytes that span several chunks (the server checks the sha256, not the tar inside)."""
    body = os.urandom(size)
    return hashlib.sha256(body).hexdigest(), body


def _chunks(store: CodeArchives, sha256: str) -> int:
    with store._engine.connect() as conn:
        return int(
            conn.execute(select(func.count()).where(chunks_t.c.sha256 == sha256)).scalar_one()
        )


def _user(replica: Replica, name: str, project: str) -> str:
    return str(replica.client.app.state.tokens.create_user(name, project)[1])


def test_code_uploaded_to_one_replica_is_served_by_another(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    token = _user(a, "uploader", "shared-project")
    sha, body = _archive()
    assert a.call("PUT", f"/v1/code/{sha}", token, body).status_code == 201
    assert archive_path(a.home, sha).read_bytes() == body  # A's cache
    assert not archive_path(b.home, sha).exists()

    held = b.call("GET", f"/v1/code/{sha}", token).json()
    assert held["held"] is True and held["size_bytes"] == len(body)
    job_id = b.launch(token, sha)  # B checks what the project holds in the store
    agent = b.client.app.state.tokens.issue_agent_token(job_id, "i-on-b")
    answer = b.call("GET", f"/v1/agents/i-on-b/code/{sha}", agent)
    assert answer.status_code == 200, answer.text
    assert answer.content == body
    cached = archive_path(b.home, sha)
    assert cached.read_bytes() == body
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600
    assert not list(code_dir(b.home).glob(".fetching-*"))  # no leftover

    # A replica whose cache was cleared (or a new one) writes it again from the store.
    archive_path(a.home, sha).unlink()
    answer = a.call("GET", f"/v1/agents/i-on-b/code/{sha}", agent)
    assert answer.status_code == 200 and answer.content == body


def test_a_damaged_archive_is_an_error_naming_it_never_other_bytes(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    token = _user(a, "damager", "damaged-project")
    sha, body = _archive()
    assert a.call("PUT", f"/v1/code/{sha}", token, body).status_code == 201
    job_id = a.launch(token, sha)
    agent = a.client.app.state.tokens.issue_agent_token(job_id, "i-dmg")
    with a.store._engine.begin() as conn:
        conn.execute(update(chunks_t).where(chunks_t.c.seq == 1).values(data=b"x" * CHUNK))
    answer = b.call("GET", f"/v1/agents/i-dmg/code/{sha}", agent)
    assert answer.status_code == 500, answer.text
    message = answer.json()["error"]["message"]
    assert sha in message and "damaged" in message and "upload it again" in message
    assert not archive_path(b.home, sha).exists()
    assert not list(code_dir(b.home).glob(".fetching-*"))

    with a.store._engine.begin() as conn:
        conn.execute(delete(chunks_t).where(chunks_t.c.seq == 2))
    answer = b.call("GET", f"/v1/agents/i-dmg/code/{sha}", agent)
    assert answer.status_code == 500 and "1 of its 4 chunks are missing" in answer.text
    assert sha in answer.json()["error"]["message"]
    assert not archive_path(b.home, sha).exists()


def test_uploading_again_writes_nothing_twice(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    token = _user(a, "again", "again-project")
    other = _user(a, "elsewhere", "other-project")
    sha, body = _archive()
    first = a.call("PUT", f"/v1/code/{sha}", token, body)
    assert first.status_code == 201 and first.json()["stored"] is True
    assert _chunks(a.store, sha) == 4
    for replica in (a, b):  # the same project again, on either replica: 200, nothing written
        again = replica.call("PUT", f"/v1/code/{sha}", token, body)
        assert again.status_code == 200 and again.json()["stored"] is False
    assert b.call("GET", f"/v1/code/{sha}", other).json()["held"] is False
    # Another project must send the bytes too; the store keeps them once.
    assert b.call("PUT", f"/v1/code/{sha}", other, body).status_code == 201
    assert b.call("GET", f"/v1/code/{sha}", other).json()["held"] is True
    assert _chunks(a.store, sha) == 4
    assert a.store.stored(sha) == len(body)


def test_two_replicas_storing_one_archive_at_once_keep_it_once(
    replicas: tuple[Replica, Replica],
) -> None:
    import io
    import threading

    a, b = replicas
    sha, body = _archive()
    gate = threading.Barrier(2)
    written: dict[str, bool] = {}

    def put(replica: Replica, project: str) -> None:
        gate.wait(timeout=30)
        written[project] = replica.store.put(sha, io.BytesIO(body), project)

    threads = [threading.Thread(target=put, args=(r, p)) for r, p in ((a, "p-a"), (b, "p-b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(written.values()) == [False, True]  # one wrote, the other found it stored
    assert _chunks(a.store, sha) == 4
    assert a.store.held("p-a", sha) == b.store.held("p-b", sha) == len(body)
    out = io.BytesIO()
    assert b.store.read_into(sha, out) and out.getvalue() == body


def test_a_tampered_upload_leaves_nothing_in_the_store(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    token = _user(a, "tamper", "tamper-project")
    sha, body = _archive()
    answer = a.call("PUT", f"/v1/code/{sha}", token, body[:-1] + b"!")
    assert answer.status_code == 400 and sha in answer.text
    assert a.store.stored(sha) is None and _chunks(a.store, sha) == 0
    assert b.call("GET", f"/v1/code/{sha}", token).json()["held"] is False


def test_the_store_keeps_a_large_archive_in_chunks_and_reads_it_back_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from spothop.db import make_engine
    from spothop.state.migrate import upgrade

    monkeypatch.setattr(code_archives, "CHUNK_BYTES", CHUNK)
    url = f"sqlite:///{tmp_path / 's.db'}"
    engine = make_engine(url)
    upgrade(engine)
    store = CodeArchives(engine)
    sha, body = _archive(10 * CHUNK + 1)
    assert store.put(sha, io.BytesIO(body), "p") is True
    assert _chunks(store, sha) == 11 and store.held("p", sha) == len(body)
    assert store.held("q", sha) is None
    out = io.BytesIO()
    assert store.read_into(sha, out) is True and out.getvalue() == body
    assert store.put(sha, io.BytesIO(body), "q") is False  # stored once, now held by both
    assert store.held("q", sha) == len(body) and _chunks(store, sha) == 11

    wrong, _ = _archive(10)
    with pytest.raises(ValueError, match=wrong):
        store.put(wrong, io.BytesIO(body), "p")
    assert store.stored(wrong) is None and _chunks(store, wrong) == 0
    assert store.read_into(wrong, io.BytesIO()) is False

    with store._engine.begin() as conn:
        conn.execute(delete(chunks_t).where(chunks_t.c.seq == 10))
    with pytest.raises(CodeArchiveDamaged, match=f"{sha} is damaged: 1 of its 11 chunks"):
        store.read_into(sha, io.BytesIO())
