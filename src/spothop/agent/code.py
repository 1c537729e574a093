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

import hashlib
import http.client
import io
import posixpath
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FETCH_ATTEMPTS = 5
FETCH_BACKOFF_S = 0.5  # doubled after each failed try: 0.5 + 1 + 2 + 4 s at most
FETCH_TIMEOUT_S = 60.0
MIB = 1024 * 1024


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


def download(
    url: str,
    token: str | None,
    *,
    attempts: int = FETCH_ATTEMPTS,
    backoff_s: float = FETCH_BACKOFF_S,
    sleep: Callable[[float], None] = time.sleep,
) -> bytes:
    """The body at ``url`` (see the module docstring, step 1)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    last = ""
    for attempt in range(attempts):
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as answer:
                body: bytes = answer.read()
                return body
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code} {err.reason}"
            if err.code < 500 and err.code != 429:
                break
        except (OSError, ValueError, http.client.HTTPException) as err:  # refused, reset, cut short
            last = str(err) or type(err).__name__
    raise CodeFetchError(f"could not fetch the job's code from {url}: {last}")


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
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = _safe_members(tar)
            workdir.mkdir(parents=True, exist_ok=True)
            tar.extractall(workdir, members=members, filter="tar")
    except (tarfile.TarError, EOFError, OSError) as err:
        raise CodeFetchError(
            f"the job's code could not be unpacked into {workdir}: {err}"
        ) from None
    return sum(1 for m in members if m.isfile())


def fetch_code(
    url: str,
    sha256: str,
    workdir: Path,
    *,
    token: str | None,
    instance_id: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> Fetched:
    """Fetch, check and unpack the job's code (see the module docstring)."""
    url = url.replace("{instance_id}", instance_id)
    data = download(url, token, sleep=sleep)
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise CodeFetchError(
            f"the job's code from {url} has sha256 {got} ({len(data)} bytes), expected {sha256}: "
            "a cut or altered download; not starting the worker"
        )
    files = unpack(data, workdir)
    return Fetched(files, len(data), sha256)
