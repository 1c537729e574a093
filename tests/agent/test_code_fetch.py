"""The agent fetches its job's code from a real HTTP server: with its token, retried after a 5xx,
checked by sha256 (a cut download is refused), unpacked only when every member stays in the workdir."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.agent.code import CodeFetchError, download, fetch_code, unpack
from spothop.controlplane import archives

TOKEN = "agent-token"


@contextlib.contextmanager
def serving(body: bytes, *, fail_first: int = 0, cut: bool = False) -> Iterator[str]:
    """A server that answers ``body`` at /code/<instance> to the right token only."""
    failures = [fail_first]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_error(401)
                return
            if failures[0] > 0:
                failures[0] -= 1
                self.send_error(503)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if cut else body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/code/{{instance_id}}"
    finally:
        server.shutdown()
        server.server_close()


def _packed(tmp_path: Path) -> archives.CodeArchive:
    work = tmp_path / "w"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "train.py").write_text("print('hi')\n")
    (work / "README").write_text("r")
    (work / "link").symlink_to("pkg/train.py")
    return archives.store_workdir(work, tmp_path / "home")


def test_the_code_is_fetched_checked_and_unpacked(tmp_path: Path) -> None:
    packed = _packed(tmp_path)
    with serving(packed.path.read_bytes(), fail_first=1) as url:
        got = fetch_code(
            url,
            packed.sha256,
            tmp_path / "wd",
            token=TOKEN,
            instance_id="i-1",
            sleep=lambda _s: None,
        )
    assert (tmp_path / "wd" / "pkg" / "train.py").read_text() == "print('hi')\n"
    assert (tmp_path / "wd" / "link").resolve() == (tmp_path / "wd" / "pkg" / "train.py")
    assert got.files == 2 and got.line().startswith(
        f"code: fetched 2 files (0.0 MiB) sha256 {packed.sha256}"
    )


def test_a_cut_download_or_a_wrong_hash_is_refused_and_nothing_unpacked(tmp_path: Path) -> None:
    packed = _packed(tmp_path)
    with serving(packed.path.read_bytes(), cut=True) as url, pytest.raises(CodeFetchError) as cut:
        fetch_code(url, packed.sha256, tmp_path / "wd", token=TOKEN, sleep=lambda _s: None)
    assert "could not fetch" in str(cut.value) or "expected" in str(cut.value)
    with serving(packed.path.read_bytes()) as url, pytest.raises(CodeFetchError) as wrong:
        fetch_code(url, "0" * 64, tmp_path / "wd", token=TOKEN)
    assert f"has sha256 {packed.sha256}" in str(wrong.value) and "not starting the worker" in str(
        wrong.value
    )
    assert not (tmp_path / "wd").exists()


def test_a_wrong_token_is_final_without_retries(tmp_path: Path) -> None:
    slept: list[float] = []
    with serving(b"x") as url, pytest.raises(CodeFetchError, match="HTTP 401"):
        download(url, "wrong", sleep=slept.append)
    assert slept == []


def _tar(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        member.size = len(data) if member.isfile() else 0
        tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "kind", "link", "said"),
    [
        ("../escape.txt", tarfile.REGTYPE, "", "unsafe path"),
        ("/etc/passwd", tarfile.REGTYPE, "", "unsafe path"),
        ("out", tarfile.SYMTYPE, "../../etc", "leads out of the workdir"),
        ("abs", tarfile.SYMTYPE, "/etc/passwd", "leads out of the workdir"),
        ("hard", tarfile.LNKTYPE, "../x", "leads out of the workdir"),
        ("dev", tarfile.CHRTYPE, "", "not a file or folder"),
    ],
)
def test_an_unsafe_member_is_refused_before_anything_is_written(
    tmp_path: Path, name: str, kind: bytes, link: str, said: str
) -> None:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, link
    with pytest.raises(CodeFetchError, match=said):
        unpack(_tar(member, b"x"), tmp_path / "wd")
    assert not (tmp_path / "wd").exists()


def test_the_archive_hash_is_the_files_sha256(tmp_path: Path) -> None:
    packed = _packed(tmp_path)
    assert hashlib.sha256(packed.path.read_bytes()).hexdigest() == packed.sha256


def _tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for member, data in members:
            member.size = len(data) if member.isfile() else 0
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return out.getvalue()


def _info(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644
) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type, member.linkname, member.mode = kind, link, mode
    return member


def test_a_chain_of_links_that_leads_out_is_not_written_through(tmp_path: Path) -> None:
    data = _tar_of(
        (_info("s", tarfile.DIRTYPE, mode=0o755), b""),
        (_info("s/b", tarfile.SYMTYPE, ".."), b""),  # the workdir itself
        (_info("a", tarfile.SYMTYPE, "s/b/.."), b""),  # looks like "s", is the workdir's parent
        (_info("a/escaped.txt"), b"x"),
    )
    with pytest.raises(CodeFetchError, match="a link would put out of the workdir"):
        unpack(data, tmp_path / "wd")
    assert not (tmp_path / "escaped.txt").exists()


def test_links_already_in_the_workdir_are_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("kept")
    work = tmp_path / "wd"
    work.mkdir()
    (work / "f").symlink_to(outside / "secret")
    (work / "d").symlink_to(outside)
    assert unpack(_tar_of((_info("f"), b"new")), work) == 1
    assert not (work / "f").is_symlink() and (work / "f").read_text() == "new"
    assert (outside / "secret").read_text() == "kept"
    with pytest.raises(CodeFetchError, match="out of the workdir"):
        unpack(_tar_of((_info("d/x"), b"x")), work)
    assert not (outside / "x").exists()


def test_modes_lose_setuid_and_group_write_as_the_tar_filter_does(tmp_path: Path) -> None:
    data = _tar_of(
        (_info("run", mode=0o4777), b"#!/bin/sh\n"),
        (_info("plain", mode=0o666), b""),
        (_info("same", tarfile.LNKTYPE, "plain"), b""),
    )
    assert unpack(data, tmp_path / "wd") == 2
    assert (tmp_path / "wd" / "run").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "wd" / "plain").stat().st_mode & 0o7777 == 0o644
    assert (tmp_path / "wd" / "same").samefile(tmp_path / "wd" / "plain")
