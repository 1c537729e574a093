"""The store under hostile conditions: a typo'd URL, a damaged file, a folder; and who may read it.

A read command never creates a store; a damaged store (the job store or the local cloud's) is
one error line naming the file and the fix, never a traceback; spothop's home and the files it
keeps there are its user's only.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spothop.db import default_database_url
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.paths import spothop_home

Cli = Callable[..., Any]


@pytest.mark.parametrize("command", [["jobs"], ["status", "j-000000"], ["logs", "j-000000"]])
def test_a_read_command_never_creates_a_store(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli(*command, "--store", "sqlite:///typo.db")
    assert result.code == 3 and "no store at typo.db" in result.err
    assert not (tmp_path / "typo.db").exists()


def test_listing_jobs_in_a_new_home_creates_nothing(cli: Cli, spothop_home: Path) -> None:
    result = cli("jobs")
    assert result.code == 0 and "no jobs yet" in result.out
    assert not (spothop_home / "spothop.db").exists()


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:5000])


def _scramble(path: Path) -> None:
    path.write_bytes(os.urandom(3000))


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


@pytest.mark.parametrize("damage", [_truncate, _scramble, _folder])
@pytest.mark.parametrize("command", [["jobs"], ["status", "j-000000"]])
def test_a_damaged_job_store_is_one_line_naming_the_file(
    cli: Cli, tmp_path: Path, damage: Callable[[Path], None], command: list[str]
) -> None:
    path = tmp_path / "store.db"
    with JobStore(f"sqlite:///{path}") as store:
        store.create_job(load_job({"name": "a", "run": "true"}))
    for extra in (tmp_path / "store.db-wal", tmp_path / "store.db-shm"):
        extra.unlink(missing_ok=True)
    damage(path)
    result = cli(*command, "--store", f"sqlite:///{path}")
    assert result.code == 2 and str(path) in result.err
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err


def test_a_damaged_local_cloud_store_is_one_line_naming_the_file(
    cli: Cli, spothop_home: Path
) -> None:
    assert cli("cloud", "ls").code == 0
    path = spothop_home / "localcloud" / "cloud.db"
    for extra in path.parent.glob("cloud.db-*"):
        extra.unlink()
    _scramble(path)
    result = cli("cloud", "ls")
    assert result.code == 2 and str(path) in result.err and "damaged" in result.err


def test_the_home_and_the_store_are_private_to_their_user(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "fresh" / "home"
    monkeypatch.setenv("SPOTHOP_HOME", str(home))
    with JobStore(default_database_url()) as store:  # as launch makes it: every job's envs
        store.create_job(load_job({"name": "a", "run": "true", "envs": {"HF_TOKEN": "hf_x"}}))
    assert cli("cloud", "ls").code == 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for path in [home / "spothop.db", home / "localcloud" / "cloud.db"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_relative_home_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPOTHOP_HOME", "relhome")
    assert spothop_home() == tmp_path / "relhome"  # every process started elsewhere finds it
