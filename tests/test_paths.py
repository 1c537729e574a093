"""Names that become paths stay plain and under their root; a SPOTHOP_HOME that is a file is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError
from spothop.paths import PLAIN_NAME_MAX_CHARS, path_under, plain_name, spothop_home


@pytest.mark.parametrize(
    "name", ["aws", "i-0abc123", "my_cloud.v2", "A", "0", "x" * PLAIN_NAME_MAX_CHARS]
)
def test_plain_names_pass_unchanged(name: str) -> None:
    assert plain_name(name, "--provider") == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "/etc",
        "a\\b",
        ".hidden",
        "-rf",
        "a\x00b",
        "a\nb",
        "a b",
        "é",
        "x" * (PLAIN_NAME_MAX_CHARS + 1),
    ],
)
def test_names_that_are_not_plain_are_refused_naming_the_option(name: str) -> None:
    with pytest.raises(ConfigError, match=r"--provider .* is not a plain name"):
        plain_name(name, "--provider")


def test_path_under_joins_plain_names(tmp_path: Path) -> None:
    assert path_under(tmp_path, "agent", "i-1") == tmp_path / "agent" / "i-1"


def test_path_under_refuses_a_name_that_climbs_out(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a plain name"):
        path_under(tmp_path, "..", "etc")


def test_path_under_refuses_a_link_that_leads_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "escape").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="leads outside"):
        path_under(root, "escape", "x")


def test_a_spothop_home_that_is_a_file_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    monkeypatch.setenv("SPOTHOP_HOME", str(home))
    with pytest.raises(ConfigError, match=r"SPOTHOP_HOME .* is a file, not a folder"):
        spothop_home()


def test_a_missing_spothop_home_is_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "new"))
    assert spothop_home() == tmp_path / "new"
