"""The job's code on the instance: fetch the packed ``workdir`` from the control plane, check it, unpack it.

Standard library only (the light agent loads it). The contract of :func:`fetch_code`:

1. GET ``url`` (``{instance_id}`` in it replaced by the agent's) with
   ``Authorization: Bearer TOKEN``, retried with backoff
   (:data:`FETCH_ATTEMPTS` tries) on a network error or a 5xx/429; a 4xx
   other than 429 is final (the token or the hash is wrong: no retry helps).
2. The bytes' sha256 must be ``sha256``: a cut or altered download is
   refused (:class:`CodeFetchError`), never unpacked.
3. Unpacked into ``workdir`` safely: a member with an absolute path, a
   ``..``, a link that leads out of ``workdir``, or a device is refused
   (:class:`CodeFetchError`, naming it) before anything is written.
4. Returns a :class:`Fetched` (files, bytes) for the agent's log line
   ``code: fetched N files (X MiB) sha256 …``.

The agent exits with a failed attempt when this raises: a worker never runs
without its code.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import http.client
import io
import os
import posixpath
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

FETCH_ATTEMPTS = 5
FETCH_BACKOFF_S = 0.5  # doubled after each failed try: 0.5 + 1 + 2 + 4 s at most
FETCH_TIMEOUT_S = 60.0
MIB = 1024 * 1024
CHUNK_BYTES = MIB
_MODE_KEPT = 0o755  # tarfile's "tar" filter: no setuid/setgid/sticky, no group/other write
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


class CodeFetchError(Exception):
    """The job's code could not be fetched, checked or unpacked (one line: what and why)."""


@dataclass(frozen=True)
class Fetched:
    files: int
    size_bytes: int
    sha256: str

    def line(self) -> str:
        """What the agent's log says."""
        return (
            f"code: fetched {self.files} files ({self.size_bytes / MIB:.1f} MiB) "
            f"sha256 {self.sha256}"
        )


def download_to(
    url: str,
    token: str | None,
    out: BinaryIO,
    *,
    attempts: int = FETCH_ATTEMPTS,
    backoff_s: float = FETCH_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[str, int]:
    """Stream the body at ``url`` into ``out`` (from its start, each try), hashing it as it comes
    (step 1); returns its sha256 and size. A body shorter than its Content-Length is a cut one."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    last = ""
    for attempt in range(attempts):
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
        request = urllib.request.Request(url, headers=headers)
        try:
            out.seek(0)
            out.truncate()
            with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as answer:
                return _stream(answer, out)
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code} {err.reason}"
            if err.code < 500 and err.code != 429:
                break
        except (OSError, ValueError, http.client.HTTPException) as err:  # refused, reset, cut short
            last = str(err) or type(err).__name__
    raise CodeFetchError(f"could not fetch the job's code from {url}: {last}")


def _stream(answer: http.client.HTTPResponse, out: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    view = memoryview(bytearray(CHUNK_BYTES))
    while got := answer.readinto(view):
        digest.update(view[:got])
        out.write(view[:got])
        size += got
    length = answer.headers.get("Content-Length", "")
    if length.isdigit() and size != int(length):
        raise http.client.IncompleteRead(b"", int(length) - size)
    return digest.hexdigest(), size


def download(
    url: str,
    token: str | None,
    *,
    attempts: int = FETCH_ATTEMPTS,
    backoff_s: float = FETCH_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """The body at ``url`` in memory (see :func:`download_to`)."""
    body = io.BytesIO()
    download_to(url, token, body, attempts=attempts, backoff_s=backoff_s, sleep=sleep)
    return body.getvalue()


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for member in members:
        name = member.name
        parts = name.split("/")
        if name.startswith("/") or ".." in parts:
            raise CodeFetchError(f"the job's code holds an unsafe path {name!r}; not unpacked")
        if member.issym() or member.islnk():
            target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
            if member.islnk():
                target = posixpath.normpath(member.linkname)
            if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
                raise CodeFetchError(
                    f"the job's code holds a link {name!r} that leads out of the workdir "
                    f"(to {member.linkname!r}); not unpacked"
                )
        elif not (member.isfile() or member.isdir()):
            raise CodeFetchError(f"the job's code holds {name!r}, not a file or folder")
    return members


def unpack(data: bytes, workdir: Path) -> int:
    """Unpack the tar.gz ``data`` into ``workdir`` (step 3); returns the number of files."""
    return unpack_file(io.BytesIO(data), workdir)


def unpack_file(packed: BinaryIO, workdir: Path) -> int:
    """Unpack the tar.gz read from ``packed`` into ``workdir`` (step 3): it is inflated once into
    a plain tar (a temporary file), every member is checked, then written; returns the files."""
    try:
        with tempfile.TemporaryFile() as plain:
            packed.seek(0)
            with gzip.GzipFile(fileobj=packed, mode="rb") as inflated:
                shutil.copyfileobj(inflated, plain, CHUNK_BYTES)
            plain.flush()
            plain.seek(0)
            with tarfile.open(fileobj=plain, mode="r:") as tar:
                members = _safe_members(tar)
                workdir.mkdir(parents=True, exist_ok=True)
                _Writer(tar, plain.fileno(), workdir).write_all(members)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise CodeFetchError(
            f"the job's code could not be unpacked into {workdir}: {err}"
        ) from None
    return sum(1 for m in members if m.isfile())


class _Writer:
    """Writes checked members under ``root`` the way tarfile's ``tar`` filter allows, without
    its per-member cost: nothing is written where a link already on disk would take it out of
    ``root`` (each folder's real path is checked, once until a link is made), a link met where a
    file goes is replaced (never written through), modes lose setuid/setgid/sticky and group and
    other write bits, folders get theirs last."""

    def __init__(self, tar: tarfile.TarFile, plain_fd: int, workdir: Path) -> None:
        self.tar, self.plain_fd = tar, plain_fd
        self.root = os.path.realpath(workdir)
        self.checked: set[str] = set()  # folders whose real path is inside root

    def write_all(self, members: list[tarfile.TarInfo]) -> None:
        folders: list[tuple[str, int]] = []
        for member in members:
            target = self._target(member.name)
            if member.isdir():
                self._inside(target, member.name)
                os.makedirs(target, exist_ok=True)
                folders.append((target, member.mode & _MODE_KEPT))
            elif member.issym():
                _unlink_existing(target)
                os.symlink(member.linkname, target)
                self.checked.clear()  # a new link may change where a checked folder leads
            elif member.islnk():
                source = os.path.join(self.root, member.linkname)
                self._inside(source, member.name)
                _unlink_existing(target)
                os.link(source, target)
            else:
                self._file(member, target)
        for folder, mode in reversed(folders):
            os.chmod(folder, mode)

    def _target(self, name: str) -> str:
        target = os.path.join(self.root, name)
        parent = os.path.dirname(target)
        if parent not in self.checked:
            self._inside(parent, name)
            os.makedirs(parent, exist_ok=True)
            self.checked.add(parent)
        return target

    def _inside(self, path: str, name: str) -> None:
        real = os.path.realpath(path)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise CodeFetchError(
                f"the job's code holds {name!r}, which a link would put out of the workdir; "
                "not unpacked"
            )

    def _file(self, member: tarfile.TarInfo, target: str) -> None:
        try:
            fd = os.open(target, _WRITE_FLAGS, 0o600)
        except OSError as err:
            if err.errno != errno.ELOOP:  # ELOOP: a link stands there
                raise
            os.unlink(target)
            fd = os.open(target, _WRITE_FLAGS, 0o600)
        try:
            if member.issparse():
                source = self.tar.extractfile(member)
                while source is not None and (chunk := source.read(CHUNK_BYTES)):
                    _write(fd, chunk)
            else:
                self._copy(fd, member.offset_data, member.size)
            os.fchmod(fd, member.mode & _MODE_KEPT)
        finally:
            os.close(fd)

    def _copy(self, fd: int, offset: int, size: int) -> None:
        while size:
            chunk = os.pread(self.plain_fd, min(size, CHUNK_BYTES), offset)
            if not chunk:
                raise EOFError("unexpected end of data")
            _write(fd, chunk)
            offset += len(chunk)
            size -= len(chunk)


def _unlink_existing(path: str) -> None:
    if os.path.lexists(path):
        os.unlink(path)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fetch_code(
    url: str,
    sha256: str,
    workdir: Path,
    *,
    token: str | None,
    instance_id: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> Fetched:
    """Fetch, check and unpack the job's code (see the module docstring). The download is
    streamed to a temporary file while it is hashed: nothing is unpacked before it matches."""
    url = url.replace("{instance_id}", instance_id)
    with tempfile.TemporaryFile() as packed:
        got, size = download_to(url, token, packed, sleep=sleep)
        if got != sha256:
            raise CodeFetchError(
                f"the job's code from {url} has sha256 {got} ({size} bytes), expected {sha256}: "
                "a cut or altered download; not starting the worker"
            )
        files = unpack_file(packed, workdir)
    return Fetched(files, size, sha256)
