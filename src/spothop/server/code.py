"""A job's code uploaded by the client: its packed ``workdir`` and ``file_mounts``, by sha256.

The server never reads a path of the client's machine: ``spothop launch --server``
packs the ``workdir`` and each local ``file_mounts`` source where they are (the same
packer, ignore files and size limit as the embedded launch:
:mod:`spothop.controlplane.archives`), uploads each archive the server lacks, and
names them by sha256 in ``POST /v1/jobs``' ``code``.

- ``GET /v1/code/{sha256}``: whether the archive is held for the token's project, as the
  store says (not this replica's home)
  (``{"sha256", "held", "size_bytes", "max_bytes"}``; ``max_bytes`` is what a
  ``PUT`` may send, so a client refuses an archive over it before sending it).
- ``PUT /v1/code/{sha256}``: the archive (the tar.gz, ``application/gzip``).
  Streamed to a temporary file beside the home's code, hashed on the way, never
  held whole in memory; over :func:`upload_max_bytes` is 413 (by ``Content-Length``
  before anything is read, or by counting a body sent without one); a body whose
  sha256 is not the path's is 400 and nothing is kept. Then written to the store
  in chunks (:mod:`spothop.state.code_archives`: the truth every replica shares,
  once per content) and recorded for the token's project, and kept in this home
  (``<home>/files/code/<sha256>.tar.gz``) as a cache: 201, or 200 when the project
  had it. Whichever replica serves the job's agents writes its own cache from the
  store (:func:`~spothop.controlplane.archives.materialize`).
- Scoped like the job routes: a user token only (an agent's is 403). An archive is
  held for a project once one of its users uploaded it: another project's ``GET``
  says it is not held (whether another project has it is not told), its ``PUT``
  must send the bytes, and its launch naming the sha256 is refused.

:func:`uploaded_code` checks a launch's ``code`` against the spec and what the
project holds (:class:`~spothop.errors.JobSpecError` naming the sha256 and the fix).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn

from fastapi import APIRouter, Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from spothop.controlplane.archives import MIB, archive_path, code_dir, max_bytes_setting
from spothop.errors import JobSpecError
from spothop.paths import FILE_MODE, spothop_home
from spothop.server.auth import require_user
from spothop.server.errors import ApiError, error_responses
from spothop.state.tokens import Principal

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec
    from spothop.server.models import CodeBody
    from spothop.service.launch import UploadedCode
    from spothop.state.code_archives import CodeArchives

router = APIRouter(
    prefix="/v1/code", tags=["code"], responses=error_responses(400, 401, 403, 413, 422, 429)
)
SHA256 = "^[0-9a-f]{64}$"
_DIGITS = re.compile(r"[0-9]{1,19}")  # a Content-Length (ASCII digits: "²".isdigit() is true)
# The archive of the limit's worth of files: tar's headers and padding (1-2 KiB a file, stored
# when the member open is), gzip's stored blocks (5 bytes in 64 KiB) fit in a quarter more.
ARCHIVE_SLACK_RATIO = 0.25
ARCHIVE_SLACK_BYTES = MIB
_WRITE_BYTES = 1024 * 1024  # received chunks written (and hashed) off the event loop in these


def upload_max_bytes() -> int:
    """The most a ``PUT`` may send: the archive of the workdir limit's worth of files
    (``$SPOTHOP_WORKDIR_MAX_MIB`` of the server), headers and padding included."""
    files = max_bytes_setting()
    return files + int(files * ARCHIVE_SLACK_RATIO) + ARCHIVE_SLACK_BYTES


def archives(request: Request) -> CodeArchives:
    """The store's archives (one per app: :func:`spothop.server.app.create_app` makes it)."""
    found: CodeArchives = request.app.state.code_archives
    return found


@router.get("/{sha256}")
def code_held(
    request: Request,
    sha256: str = Path(pattern=SHA256),
    principal: Principal = Depends(require_user),
) -> dict[str, Any]:
    """Whether the archive ``sha256`` is held for the token's project (see the module)."""
    size = archives(request).held(principal.project or "", sha256)
    return {
        "sha256": sha256,
        "held": size is not None,
        "size_bytes": size,
        "max_bytes": upload_max_bytes(),
    }


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "PayloadTooLarge",
        f"the archive is over {limit} bytes, the most this server takes "
        "(its SPOTHOP_WORKDIR_MAX_MIB, headers included); leave large files out in "
        ".spothopignore (put data in a bucket)",
    )


@router.put("/{sha256}", status_code=201, responses=error_responses(413))
async def upload_code(
    request: Request,
    sha256: str = Path(pattern=SHA256),
    principal: Principal = Depends(require_user),
) -> JSONResponse:
    """Store the archive sent as the body (``application/gzip``), checked against ``sha256``."""
    limit = upload_max_bytes()
    declared = request.headers.get("content-length")
    if declared is not None:
        if not _DIGITS.fullmatch(declared.strip()):
            raise ApiError(400, "BadRequest", "Content-Length is not a number")
        if int(declared) > limit:
            raise _too_large(limit)
    home = spothop_home()
    folder = code_dir(home)
    await run_in_threadpool(folder.mkdir, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".tar.gz")
    tmp = FilePath(name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest, size = await _receive(request, out, limit)
        if digest != sha256:
            raise ApiError(
                400,
                "BadRequest",
                f"the body's sha256 is {digest} ({size} bytes), not {sha256}: the upload was "
                "cut or changed on the way; nothing was kept, send the archive again",
            )
        project = principal.project or ""
        store = archives(request)
        had = await run_in_threadpool(store.held, project, sha256) is not None
        await run_in_threadpool(_keep, store, home, tmp, sha256, project)
    finally:
        tmp.unlink(missing_ok=True)
    body = {"sha256": sha256, "size_bytes": size, "stored": not had}
    return JSONResponse(body, status_code=200 if had else 201)


async def _receive(request: Request, out: BinaryIO, limit: int) -> tuple[str, int]:
    """Write the body to ``out`` as it arrives; its sha256 and size. 413 past ``limit``."""
    digest = hashlib.sha256()
    size = 0
    pending = bytearray()

    def flush(data: bytes) -> None:
        digest.update(data)
        out.write(data)

    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            pending += chunk
            if len(pending) >= _WRITE_BYTES:
                await run_in_threadpool(flush, bytes(pending))
                pending.clear()
    except ClientDisconnect:
        raise ApiError(400, "BadRequest", "the client went away before the body ended") from None
    if pending:
        await run_in_threadpool(flush, bytes(pending))
    return digest.hexdigest(), size


def _keep(store: CodeArchives, home: FilePath, tmp: FilePath, sha256: str, project: str) -> None:
    """Write the checked upload to the store (unless it has the content) for ``project``, then
    keep it in this home as the cache (unless the content is there)."""
    with tmp.open("rb") as source:
        store.put(sha256, source, project)
    final = archive_path(home, sha256)
    if not final.is_file():
        os.chmod(tmp, FILE_MODE)  # a job's code: its user's only
        os.replace(tmp, final)


def uploaded_code(
    principal: Principal, spec: JobSpec, code: CodeBody | None, store: CodeArchives
) -> UploadedCode:
    """A launch's ``code`` checked against ``spec`` and what the token's project holds: each
    archive named must be held (else :class:`~spothop.errors.JobSpecError` naming it and the
    fix); a ``workdir`` needs its archive named; a named mount must be one of the spec's."""
    from spothop.service.launch import UploadedCode

    project = principal.project or ""
    workdir = code.workdir if code else None
    mounts = dict(code.file_mounts) if code else {}
    if spec.workdir and workdir is None:
        _refuse(
            "code.workdir",
            f"the job's workdir ({spec.workdir}) is a folder of the client's machine, which this "
            "server does not read: upload its archive (PUT /v1/code/{sha256}) and name it in "
            "code.workdir; `spothop launch --server` does both",
        )
    if workdir is not None and not spec.workdir:
        _refuse("code.workdir", "an archive is named but the job has no workdir; leave it out")
    if unknown := sorted(set(mounts) - set(spec.file_mounts)):
        _refuse(
            f"code.file_mounts.{unknown[0]}",
            f"{unknown[0]!r} is not one of the job's file_mounts; leave it out",
        )
    named = {"code.workdir": workdir} if workdir else {}
    named |= {f"code.file_mounts.{dest}": mount.sha256 for dest, mount in mounts.items()}
    for field, sha256 in named.items():
        if store.held(project, sha256) is None:
            _refuse(
                field,
                f"archive {sha256} is not on this server for project {project!r}: upload it "
                f"first (PUT /v1/code/{sha256}) and launch again; `spothop launch --server` "
                "uploads what the server lacks",
            )
    return UploadedCode(
        workdir=workdir, mounts={dest: (m.sha256, m.file) for dest, m in mounts.items()}
    )


def _refuse(field: str, message: str) -> NoReturn:
    raise JobSpecError(f"{field}: {message}", [(field, message)])
