"""Shared nvidia-smi samples, read in place from the workspace's shared data (never copied here)."""

from __future__ import annotations

from pathlib import Path

import pytest

# tests/resources/topology/conftest.py -> parents[3] is the project root.
DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "nvidia-smi"


def data_file(relative: str) -> Path:
    path = DATA / relative
    if not path.is_file():
        pytest.skip(f"shared sample {path} is not present")
    return path


def read(relative: str) -> str:
    return data_file(relative).read_text(encoding="utf-8")


def sample_files() -> list[Path]:
    """Every sample (LICENSE files aside); empty when the shared data is absent."""
    if not DATA.is_dir():
        return []
    return sorted(p for p in DATA.glob("*/*") if p.is_file() and p.name != "LICENSE")
