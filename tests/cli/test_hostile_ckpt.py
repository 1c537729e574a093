"""Hostile input to ``spothop ckpt``: one clear line with its exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError, NotFoundError
from tests.cli.hostile import Row, rows, run_row


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_bytes(b"\x00\xffnot a checkpoint folder")
    (tmp_path / "empty").mkdir()
    markup = tmp_path / "m[" / "x] [red]y[bold]"
    markup.mkdir(parents=True)
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "manifest.json").write_bytes(b"\x89PNG\x00\xff")
    return {
        "missing": str(tmp_path / "nowhere"),
        "file": str(tmp_path / "file"),
        "empty": str(tmp_path / "empty"),
        "markup": str(markup),
        "garbage": str(tmp_path / "garbage"),
    }


CKPT = rows(
    Row("ls-missing", ["ckpt", "ls", "{missing}"], 3, NotFoundError, "nowhere"),
    Row("ls-a-file", ["ckpt", "ls", "{file}"], 2, ConfigError),
    Row("ls-empty", ["ckpt", "ls", "{empty}"], 0),
    Row(
        "ls-markup", ["ckpt", "ls", "{markup}"], 0, None, "[red]y[bold]"
    ),  # the title may wrap: part of the name
    Row("verify-missing", ["ckpt", "verify", "{missing}"], 3, NotFoundError, "nowhere"),
    Row("verify-garbage", ["ckpt", "verify", "{garbage}"], 0),
    Row("show-unknown-id", ["ckpt", "show", "{empty}", "--id", "[/x]"], 3, NotFoundError),
    Row("gc-negative-keep", ["ckpt", "gc", "{empty}", "--keep", "-1"], 2, ConfigError),
    Row("ls-bad-url", ["ckpt", "ls", "nosuchscheme://[red]bucket"], 2, ConfigError, "[red]bucket"),
)


@pytest.mark.parametrize("row", CKPT)
def test_ckpt_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
