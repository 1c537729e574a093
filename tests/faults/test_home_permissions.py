"""A home the user made keeps its mode, is warned about once when others can open it, and every
file spothop keeps in it is its user's only.

The home spothop creates is 0700 (tests/cli/test_hostile_store.py). One its user made (say 0755,
as ``mkdir`` leaves it) is the user's choice: spothop never changes its mode, but says once, on
stderr, that others can open it and how to stop that; and every file and folder spothop writes
there (the store, the sealed secrets' key, the controller's logs and locks, the agent API's
files, the wheel in ``dist/``, the jobs' code in ``files/code/``, the local cloud and its
instances) is its user's only whatever the home's mode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.paths import open_private, private_dir
from tests.jobs.e2e.conftest import WORLD, running_harness, script_job

Cli = Callable[..., Any]


def _shared_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)  # as mkdir leaves it under the common umask 022
    monkeypatch.setenv("SPOTHOP_HOME", str(home))
    return home


def test_a_home_open_to_others_is_warned_about_once_and_left_as_it_is(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _shared_home(tmp_path, monkeypatch)
    with JobStore(f"sqlite:///{home / 'spothop.db'}") as store:
        store.create_job(load_job({"name": "a", "run": "true"}))
    first, second = cli("jobs"), cli("cloud", "ls")
    assert first.code == 0 and second.code == 0
    warned = [line for line in (first.err + second.err).splitlines() if "warning" in line]
    assert warned == [
        f"warning: spothop's home {home} is open to other users (mode 0755); it holds every "
        f"job's envs and the agents' tokens: chmod 700 {home}"
    ]
    assert stat.S_IMODE(home.stat().st_mode) == 0o755  # never chmodded behind the user's back


def test_a_private_home_is_not_warned_about(cli: Cli, spothop_home: Path) -> None:
    assert stat.S_IMODE(spothop_home.stat().st_mode) == 0o700
    result = cli("cloud", "ls")
    assert result.code == 0 and "warning" not in result.err


def test_folders_and_files_spothop_makes_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)  # the most permissive: every bit asked for is kept
    try:
        folder = private_dir(tmp_path / "a" / "b")
        with open_private(folder / "log") as out:
            out.write(b"x")
    finally:
        os.umask(old)
    for path in (tmp_path / "a", folder):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert stat.S_IMODE((folder / "log").stat().st_mode) == 0o600


def _open_to_others(home: Path, path: Path) -> bool:
    """Whether another user can open ``path``: every folder from ``home`` down lets them in,
    and the path itself lets them read it."""
    for folder in [home, *reversed(path.relative_to(home).parents)][1:]:
        if not stat.S_IMODE((home / folder).stat().st_mode) & 0o011:
            return False
    return bool(stat.S_IMODE(path.stat().st_mode) & 0o044)


def _machine_disk(home: Path, path: Path) -> bool:
    """A local instance's own disk (``localcloud/instances/ID/root``): its files keep the modes
    a machine gives them (a venv's scripts, the job's unpacked code), inside the instance's
    private folder."""
    parts = path.relative_to(home).parts
    return parts[:2] == ("localcloud", "instances") and len(parts) > 3 and parts[3] == "root"


def test_every_file_spothop_keeps_in_a_home_open_to_others_is_its_users_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _shared_home(tmp_path, monkeypatch)
    code = tmp_path / "code"
    code.mkdir()
    (code / "job.py").write_text("import os\nprint('token', len(os.environ['HF_TOKEN']))\n")
    spec = {**script_job(code / "job.py"), "name": "private", "secrets": {"HF_TOKEN": "hf_x"}}
    with running_harness(tmp_path, monkeypatch, WORLD) as h:
        job_id = h.launch(spec)
        job = h.wait_final(job_id, 120, what="the job to end")
        assert job.state == "succeeded", job.reason
    kept = {p.relative_to(home).as_posix() for p in home.rglob("*")}
    for expected in ("store.db", "secret.key", "controller/controller.log", "localcloud"):
        assert expected in kept, sorted(k for k in kept if "/root/" not in k)
    for folder in ("dist/", "files/code/"):
        assert any(k.startswith(folder) for k in kept), folder
    paths = [p for p in home.rglob("*") if not p.is_symlink()]
    loose = [
        f"{stat.S_IMODE(p.stat().st_mode):04o} {p.relative_to(home)}"
        for p in paths
        if not _machine_disk(home, p) and stat.S_IMODE(p.stat().st_mode) & 0o077
    ]
    assert loose == []
    assert [p for p in paths if _open_to_others(home, p)] == []
    assert stat.S_IMODE(home.stat().st_mode) == 0o755
