"""Packing a job's workdir: what the ignore files leave out, the same bytes for the same tree, the
size limit naming the largest files, and one line for each bad input."""

from __future__ import annotations

import gzip
import os
import tarfile
from pathlib import Path

import pytest

from spothop.controlplane import archives
from spothop.errors import JobSpecError


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _names(archive: archives.CodeArchive) -> list[str]:
    with tarfile.open(archive.path) as tar:
        return tar.getnames()


def test_ignore_files_and_git_are_left_out_as_git_would(tmp_path: Path) -> None:
    work = _tree(
        tmp_path / "w",
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\n",
            "a/x.py": "x",
            "a/y.log": "y",
            "a/keep.log": "k",
            "a/top.txt": "deeper: kept",
            "top.txt": "root only: left out",
            "build/out.bin": "b",
            "b/.spothopignore": "secret\n",
            "b/secret": "s",
            "b/c/secret": "s2",
            "secret": "not under b: kept",
            ".git/HEAD": "ref",
        },
    )
    got = archives.store_workdir(work, tmp_path / "home")
    assert _names(got) == [
        ".gitignore",
        "a",
        "a/keep.log",
        "a/top.txt",
        "a/x.py",
        "b",
        "b/.spothopignore",
        "b/c",
        "secret",
    ]
    assert got.files == 6 and got.path == archives.archive_path(tmp_path / "home", got.sha256)


def test_the_same_tree_packs_to_the_same_sha256_wherever_it_lies(tmp_path: Path) -> None:
    files = {"a.py": "print(1)\n", "d/e.txt": "e", "run.sh": "#!/bin/sh\n"}
    one, two = _tree(tmp_path / "one", files), _tree(tmp_path / "two", files)
    (one / "run.sh").chmod(0o755)
    (two / "run.sh").chmod(0o755)
    os.utime(two / "a.py", (1, 1))
    first = archives.store_workdir(one, tmp_path / "home")
    second = archives.store_workdir(two, tmp_path / "home")
    assert first.sha256 == second.sha256 and first.path == second.path
    with tarfile.open(first.path) as tar:
        assert tar.getmember("run.sh").mode == 0o755 and tar.getmember("a.py").mode == 0o644
        assert {m.mtime for m in tar.getmembers()} == {0}
    (two / "a.py").write_text("print(2)\n")
    assert archives.store_workdir(two, tmp_path / "home").sha256 != first.sha256


def test_a_link_inside_is_kept_relative_and_one_out_is_refused(tmp_path: Path) -> None:
    work = _tree(tmp_path / "w", {"data/x.txt": "x"})
    (work / "here").symlink_to(work / "data" / "x.txt")  # absolute, but inside
    with tarfile.open(archives.store_workdir(work, tmp_path / "home").path) as tar:
        assert tar.getmember("here").linkname == "data/x.txt"
    (work / "data" / "away").symlink_to(tmp_path)
    with pytest.raises(JobSpecError, match=r"the link data/away points out of the workdir"):
        archives.store_workdir(work, tmp_path / "home")


def test_over_the_limit_names_the_limit_and_the_largest_files(tmp_path: Path) -> None:
    work = _tree(tmp_path / "w", {"big.bin": "x" * 3000, "mid.bin": "x" * 2000, "s": "x"})
    with pytest.raises(JobSpecError) as caught:
        archives.store_workdir(work, tmp_path / "home", max_bytes=4000)
    message = str(caught.value)
    assert "over the limit" in message and archives.MAX_BYTES_ENV in message
    assert message.index("big.bin") < message.index("mid.bin") and "\n" not in message
    assert not list((tmp_path / "home").rglob("*.tar.gz"))


def test_the_limit_is_read_from_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(archives.MAX_BYTES_ENV, "2")
    assert archives.max_bytes_setting() == 2 * archives.MIB
    monkeypatch.setenv(archives.MAX_BYTES_ENV, "lots")
    with pytest.raises(JobSpecError, match="not a positive number"):
        archives.max_bytes_setting()


def test_each_bad_workdir_is_one_line_naming_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(JobSpecError, match="does not exist"):
        archives.store_workdir(tmp_path / "missing", home)
    (tmp_path / "f").write_text("x")
    with pytest.raises(JobSpecError, match="is a file"):
        archives.store_workdir(tmp_path / "f", home)
    work = _tree(tmp_path / "w", {".spothopignore": "ok\n!\n"})
    with pytest.raises(JobSpecError, match=r"\.spothopignore line 2: '!' is not a valid"):
        archives.store_workdir(work, home)
    # A character range backwards: pathspec hands re's own error up, not a ValueError.
    (work / ".spothopignore").write_text("[z-a]\n")
    with pytest.raises(JobSpecError, match=r"\.spothopignore line 1: '\[z-a\]' is not a valid"):
        archives.store_workdir(work, tmp_path / "home")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    work = _tree(tmp_path / "w", {"ok.py": "x", "sub/locked.txt": "x"})
    (work / "sub" / "locked.txt").chmod(0)
    try:
        with pytest.raises(JobSpecError, match=r"cannot read sub/locked\.txt"):
            archives.store_workdir(work, tmp_path / "home")
    finally:
        (work / "sub" / "locked.txt").chmod(0o644)


def test_what_does_not_compress_is_stored_and_any_reader_reads_it_all(tmp_path: Path) -> None:
    noise = os.urandom(200_000)
    text = b"def f(x):\n    return x\n" * 20_000
    work = tmp_path / "w"
    work.mkdir()
    (work / "noise.bin").write_bytes(noise)
    (work / "code.py").write_bytes(text)
    (work / "tiny").write_bytes(b"t")
    packed = archives.store_workdir(work, tmp_path / "home")
    assert packed.archive_bytes < len(noise) + len(text) // 10  # the code shrank, the noise did not
    with tarfile.open(packed.path) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {"code.py": text, "noise.bin": noise, "tiny": b"t"}
    assert gzip.decompress(packed.path.read_bytes())[-1024:] == bytes(1024)
