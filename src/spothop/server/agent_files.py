"""What instances download from the control plane: spothop's wheel and their job's code.

- ``GET /v1/dist/{sha256}/{filename}``: a wheel of spothop this control plane
  built (:mod:`spothop.controlplane.dist`), by its content: the code it runs, or
  an earlier code's that a launch named before the code changed (so an instance
  always gets the bytes its boot script checks); streamed; no token (spothop's
  own public code, fetched by the boot script before the agent has its token in
  use); 404 for any other.
- ``GET /v1/agents/{instance_id}/code/{sha256}``: the job's packed workdir
  (:mod:`spothop.controlplane.archives`), streamed, with the agent's token:
  403 unless ``{instance_id}`` is the token's instance and ``{sha256}`` is the
  archive its job recorded at launch (its workdir's, or one of its uploaded
  ``file_mounts``: :mod:`spothop.controlplane.mounts`); from this home's
  cache, written from the store first when this replica lacks it (another
  replica took the upload: :func:`~spothop.controlplane.archives.materialize`);
  404 when the store does not hold it either, 500 naming the sha256 when what
  the store holds is damaged (never other bytes).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse

from spothop.controlplane.archives import materialize
from spothop.controlplane.dist import build_wheel, find_wheel
from spothop.paths import spothop_home
from spothop.server.auth import require_agent
from spothop.server.errors import ApiError, error_responses, forbidden, not_found
from spothop.state.code_archives import CodeArchiveDamaged
from spothop.state.tokens import Principal

router = APIRouter(tags=["agent files"], responses=error_responses(401, 403, 404))
WHEEL_MEDIA_TYPE = "application/zip"
# A wheel's file name, nothing else: no folder, no `..`, no glob character (the cache is globbed)
WHEEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,190}\.whl$"
ARCHIVE_MEDIA_TYPE = "application/gzip"


@router.get("/v1/dist/{sha256}/{filename}", response_class=FileResponse)
async def wheel(
    sha256: str = Path(pattern="^[0-9a-f]{64}$"),
    filename: str = Path(max_length=200, pattern=WHEEL_NAME),
) -> FileResponse:
    """A spothop wheel this control plane built, by its content: its own code's (built once per
    code, cached under the home), or an earlier code's that a launch named before the code
    changed (the cache keeps it)."""
    home = spothop_home()
    built = await run_in_threadpool(build_wheel, home)
    path = built.path if (built.sha256, built.filename) == (sha256, filename) else None
    if path is None:
        path = await run_in_threadpool(find_wheel, home, sha256, filename)
    if path is None or not path.is_file():
        raise not_found(
            f"no wheel {filename!r} with sha256 {sha256} here; this control plane serves "
            f"{built.filename} with sha256 {built.sha256}"
        )
    return FileResponse(path, media_type=WHEEL_MEDIA_TYPE, filename=filename)


@router.get("/v1/agents/{instance_id}/code/{sha256}", response_class=FileResponse)
async def code(
    request: Request,
    instance_id: str = Path(min_length=1, max_length=128),
    sha256: str = Path(pattern="^[0-9a-f]{64}$"),
    principal: Principal = Depends(require_agent),
) -> FileResponse:
    """The token's job's packed workdir (see the module docstring for the scoping)."""
    if instance_id != principal.instance_id:
        raise forbidden(
            f"the path is about instance {instance_id!r}; this token is for instance"
            f" {principal.instance_id!r} only"
        )
    assert principal.job_id is not None  # an agent's token
    job = await run_in_threadpool(request.app.state.store.get_job, principal.job_id)
    if sha256 != job.code_sha256 and sha256 not in job.mount_sha256s:
        raise forbidden(
            f"archive {sha256} is neither the code nor a file mount of job {principal.job_id}"
        )
    try:
        path = await run_in_threadpool(
            materialize, spothop_home(), sha256, request.app.state.code_archives
        )
    except CodeArchiveDamaged as err:
        raise ApiError(500, "CodeArchiveDamaged", str(err)) from None
    if path is None:
        raise not_found(f"the code of job {principal.job_id} ({sha256}) is not stored here")
    return FileResponse(path, media_type=ARCHIVE_MEDIA_TYPE)
