"""Pruning packed code (spothop.controlplane.prune): an archive goes when no unfinished job names
it, nor one that ended within the kept days, and it was not packed or uploaded within them; the
home's files and the store's uploads alike, a stored one whole or not at all."""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from spothop.cli.main import main
from spothop.controlplane.archives import archive_path, code_dir, store_workdir
from spothop.controlplane.prune import DAY_S, DailyCodePrune, keep_days_setting, prune_code
from spothop.errors import ConfigError
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.state.code_archives import CodeArchives
from spothop.state.code_tables import code_archive_chunks, code_archive_projects, code_archives
from spothop.state.job_tables import jobs

NOW = time.time()  # the command and the re-packing read the real clock
KEEP_S = 7 * DAY_S
OLD = NOW - 30 * DAY_S  # well past the kept days
RECENT = NOW - DAY_S  # within them


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("SPOTHOP_HOME", str(home))
    monkeypatch.delenv("SPOTHOP_CODE_KEEP_DAYS", raising=False)
    return home


@pytest.fixture
def store(home: Path) -> JobStore:
    store = JobStore(f"sqlite:///{home / 'spothop.db'}")
    yield store
    store.close()


def packed(home: Path, text: str, *, mtime: float) -> str:
    """A workdir holding ``text`` packed into the home; its file's mtime set; its sha256."""
    workdir = home.parent / f"src-{text}"
    workdir.mkdir(exist_ok=True)
    (workdir / "main.py").write_text(text)
    sha256 = store_workdir(workdir, home).sha256
    os.utime(archive_path(home, sha256), (mtime, mtime))
    return sha256


def job(
    store: JobStore,
    *,
    code: str | None = None,
    mounts: list[str] = (),  # type: ignore[assignment]
    state: str = "running",
    updated: float = NOW,
) -> str:
    mounts_json = (
        json.dumps([{"dest": f"/m{i}", "sha256": s, "file": False} for i, s in enumerate(mounts)])
        if mounts
        else None
    )
    job_id = store.create_job(
        load_job({"name": "p", "run": "true"}), code_sha256=code, mounts_json=mounts_json
    )
    with store.engine.begin() as conn:
        conn.execute(
            update(jobs).where(jobs.c.job_id == job_id).values(state=state, updated_unix_s=updated)
        )
    return job_id


def test_an_old_archive_no_job_names_goes_and_one_a_job_needs_stays(
    home: Path, store: JobStore
) -> None:
    unused = packed(home, "unused", mtime=OLD)
    running = packed(home, "running", mtime=OLD)
    mounted = packed(home, "mounted", mtime=OLD)
    ended_lately = packed(home, "ended-lately", mtime=OLD)
    ended_long_ago = packed(home, "ended-long-ago", mtime=OLD)
    fresh = packed(home, "fresh", mtime=RECENT)  # packed for a launch whose job is not stored yet
    job(store, code=running, state="running")
    job(store, mounts=[mounted], state="pending")
    job(store, code=ended_lately, state="succeeded", updated=RECENT)
    job(store, code=ended_long_ago, state="failed", updated=OLD)

    pruned = prune_code(store.engine, home, keep_s=KEEP_S, now=NOW)

    assert sorted(pruned.files) == sorted([unused, ended_long_ago])
    assert pruned.kept_in_use == 3
    left = {p.name.removesuffix(".tar.gz") for p in code_dir(home).iterdir()}
    assert left == {running, mounted, ended_lately, fresh}
    assert pruned.freed_bytes > 0


def test_a_dry_run_lists_what_would_go_and_removes_nothing(home: Path, store: JobStore) -> None:
    unused = packed(home, "unused", mtime=OLD)
    pruned = prune_code(store.engine, home, keep_s=KEEP_S, now=NOW, dry_run=True)
    assert pruned.files == [unused] and pruned.dry_run
    assert archive_path(home, unused).is_file()


def test_half_written_files_go_once_old_and_files_not_spothops_stay(
    home: Path, store: JobStore
) -> None:
    folder = code_dir(home)
    folder.mkdir(parents=True)
    for name in (".packing-abc.tar.gz", ".fetching-def.tar.gz", "notes.txt"):
        (folder / name).write_text("x")
        os.utime(folder / name, (OLD, OLD))
    (folder / ".packing-new.tar.gz").write_text("x")  # a packing under way now
    pruned = prune_code(store.engine, home, keep_s=KEEP_S, now=time.time())
    assert sorted(pruned.partials) == [".fetching-def.tar.gz", ".packing-abc.tar.gz"]
    assert sorted(p.name for p in folder.iterdir()) == [".packing-new.tar.gz", "notes.txt"]


def test_packing_the_same_code_again_renews_it(home: Path, store: JobStore) -> None:
    """A launch of unchanged code packs it again before storing its job: the old file is not
    taken for code no job needs in between."""
    sha256 = packed(home, "same", mtime=OLD)
    again = store_workdir(home.parent / "src-same", home)
    assert again.sha256 == sha256
    assert prune_code(store.engine, home, keep_s=KEEP_S, now=time.time()).files == []
    assert archive_path(home, sha256).is_file()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, home: Path) -> JobStore:
    """The job store on SQLite, and on PostgreSQL (a fresh schema)."""
    if request.param == "sqlite":
        url = f"sqlite:///{home / 'spothop.db'}"
    else:
        from tests.conftest import POSTGRES_URL

        schema = request.getfixturevalue("pg_schema")
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    store = JobStore(url)
    yield store
    store.close()


def stored(store: JobStore, text: bytes, *, at: float, project: str = "team") -> str:
    import hashlib

    sha256 = hashlib.sha256(text).hexdigest()
    CodeArchives(store.engine, clock=lambda: at).put(sha256, io.BytesIO(text), project)
    return sha256


def counts(store: JobStore, sha256: str) -> tuple[int, int, int]:
    with store.engine.connect() as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(select(func.count()).where(t.c.sha256 == sha256)).scalar_one()
            for t in (code_archives, code_archive_chunks, code_archive_projects)
        )


def test_a_stored_upload_no_job_needs_goes_whole_and_a_needed_one_stays(
    home: Path, any_store: JobStore
) -> None:
    store = any_store
    unused = stored(store, b"unused" * 1000, at=OLD)
    needed = stored(store, b"needed" * 1000, at=OLD)
    uploaded_again = stored(store, b"again" * 1000, at=OLD)
    CodeArchives(store.engine, clock=lambda: RECENT).put(
        uploaded_again, io.BytesIO(b"again" * 1000), "team"
    )  # the same project uploads it again lately: its time renewed
    other_project = stored(store, b"other" * 1000, at=OLD)
    stored(store, b"other" * 1000, at=RECENT, project="another")
    job(store, code=needed, state="recovering")

    pruned = prune_code(store.engine, home, keep_s=KEEP_S, now=NOW)

    assert pruned.stored == [unused]
    assert counts(store, unused) == (0, 0, 0)  # its row, its chunks, its projects
    assert counts(store, needed) == (1, 1, 1)
    assert counts(store, uploaded_again) == (1, 1, 1)
    assert counts(store, other_project) == (1, 1, 2)
    assert CodeArchives(store.engine).held("team", unused) is None  # the client uploads again


def test_the_controller_prunes_once_a_day_and_a_failure_never_stops_a_pass(
    home: Path, store: JobStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [0.0]
    daily = DailyCodePrune(home, clock=lambda: clock[0])
    unused = packed(home, "unused", mtime=OLD)
    daily(store, {}, None)
    assert not archive_path(home, unused).exists()
    again = packed(home, "again", mtime=OLD)
    clock[0] = DAY_S - 1
    daily(store, {}, None)
    assert archive_path(home, again).is_file()  # not a day yet
    clock[0] = DAY_S
    store.close()  # the next prune cannot read the store: logged, not raised
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE jobs")
    daily(store, {}, None)
    assert "pruning unused code failed" in caplog.text


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "1e9"])
def test_a_bad_keep_days_is_a_clear_error_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match="SPOTHOP_CODE_KEEP_DAYS"):
        keep_days_setting({"SPOTHOP_CODE_KEEP_DAYS": value})
    assert keep_days_setting({}) == 7.0
    assert keep_days_setting({"SPOTHOP_CODE_KEEP_DAYS": "0.5"}) == 0.5


def run_cli(*args: str) -> tuple[int, str]:
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def test_the_command_prunes_now_and_says_what_went(
    home: Path, store: JobStore, capsys: pytest.CaptureFixture[str]
) -> None:
    unused = packed(home, "unused", mtime=time.time() - 30 * DAY_S)
    url = f"sqlite:///{home / 'spothop.db'}"
    code, text = run_cli("db", "prune-code", "--url", url, "--dry-run", "--json")
    assert code == 0
    assert json.loads(text)["files"] == [unused] and archive_path(home, unused).is_file()
    code, text = run_cli("db", "prune-code", "--url", url)
    assert code == 0 and "removed 1 archive(s)" in text and unused[:16] in text
    assert not archive_path(home, unused).exists()
    assert main(["db", "prune-code", "--url", url, "--keep-days", "soon"]) != 0
    assert "--keep-days is not a number of days" in capsys.readouterr().err
