"""Fixtures every test shares: an isolated SPOTHOP_HOME and the shared real-world data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# Real traces, prices, catalogs and nvidia-smi outputs are read in place from
# ../shared/data (never copied into the project); SPOTHOP_SHARED_DATA points elsewhere.
SHARED_DATA = Path(os.environ.get("SPOTHOP_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data")).resolve()


def shared_path(*parts: str) -> Path:
    """A path under the shared data; the calling test is skipped if it is not there."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data {path} not present (set SPOTHOP_SHARED_DATA)")
    return path


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own SPOTHOP_HOME, so no test reads or writes a user's files."""
    home = tmp_path_factory.mktemp("spothop-home")
    monkeypatch.setenv("SPOTHOP_HOME", str(home))
    monkeypatch.delenv("SPOTHOP_FX_RATES", raising=False)
    return home


@pytest.fixture
def spothop_home(_isolated_home: Path) -> Path:
    return _isolated_home
