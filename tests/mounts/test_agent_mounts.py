"""The agent puts the job's file mounts on the node: an upload fetched from a real HTTP server
with its token and checked, a bucket folder and a bucket URL copied; a failure names the mount."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from spothop.agent.mounts import MountError, apply_mounts
from spothop.controlplane.archives import store_mount


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, dict[str, bytes]]]:
    """A real HTTP server answering ``/<name>`` from a dict, only with ``Bearer t``."""
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path.rsplit("/", 1)[-1])
            if self.headers.get("Authorization") != "Bearer t" or body is None:
                self.send_error(403)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/agents/{{instance_id}}/code", files
    finally:
        server.shutdown()


def _upload(tmp_path: Path, source: Path, files: dict[str, bytes]) -> str:
    packed = store_mount(source, "file_mounts 'x'", tmp_path / "home")
    files[packed.sha256] = packed.path.read_bytes()
    return packed.sha256


def test_uploads_and_bucket_copies_land_where_asked(
    tmp_path: Path, served: tuple[str, dict[str, bytes]]
) -> None:
    base, files = served
    local = tmp_path / "local"
    (local / "sub").mkdir(parents=True)
    (local / "sub" / "a.txt").write_text("uploaded")
    (tmp_path / "one.cfg").write_text("k=v")
    bucket = tmp_path / "bucket" / "data"
    bucket.mkdir(parents=True)
    (bucket / "b.txt").write_text("from the bucket")
    folder_sha = _upload(tmp_path, local, files)
    file_sha = _upload(tmp_path, tmp_path / "one.cfg", files)
    node = tmp_path / "node"
    lines: list[str] = []
    mounts = [
        {"dest": "up", "fetch": f"{base}/{folder_sha}", "sha256": folder_sha, "file": False},
        {
            "dest": str(node / "etc" / "c.cfg"),
            "fetch": f"{base}/{file_sha}",
            "sha256": file_sha,
            "file": True,
        },
        {"dest": str(node / "b"), "copy": str(bucket)},
        {"dest": "viaurl", "copy": f"local://{bucket}"},
    ]
    apply_mounts(mounts, node / "work", token="t", instance_id="i-1", log=lines.append)
    assert (node / "work" / "up" / "sub" / "a.txt").read_text() == "uploaded"
    assert (node / "etc" / "c.cfg").read_text() == "k=v"
    assert (node / "b" / "b.txt").read_text() == "from the bucket"
    assert (node / "work" / "viaurl" / "b.txt").read_text() == "from the bucket"
    assert lines[0].startswith(f"mount: {node / 'work' / 'up'} \u2190 upload {folder_sha[:12]}")
    assert "(1 files, 0.0 MiB)" in lines[0] and len(lines) == 4


@pytest.mark.parametrize(
    ("mount", "words"),
    [
        ({"dest": "/x", "copy": "/no/such/bucket/path"}, "mount /x: the source /no/such"),
        ({"dest": "u", "copy": "local:///no/such/path"}, "mount u: cannot copy local:///no/such"),
    ],
)
def test_a_missing_source_fails_naming_the_mount(
    tmp_path: Path, mount: dict[str, object], words: str
) -> None:
    with pytest.raises(MountError, match=words):
        apply_mounts([mount], tmp_path)


def test_a_wrong_token_or_hash_is_refused(
    tmp_path: Path, served: tuple[str, dict[str, bytes]]
) -> None:
    base, files = served
    (tmp_path / "d").mkdir()
    sha = _upload(tmp_path, tmp_path / "d", files)
    mount = {"dest": "d", "fetch": f"{base}/{sha}", "sha256": sha, "file": False}
    with pytest.raises(MountError, match=r"mount d: could not fetch the mount .* HTTP 403"):
        apply_mounts([mount], tmp_path / "n", token="wrong")
    with pytest.raises(MountError, match="mount d: the download has sha256"):
        apply_mounts(
            [{**mount, "sha256": hashlib.sha256(b"").hexdigest()}], tmp_path / "n", token="t"
        )
