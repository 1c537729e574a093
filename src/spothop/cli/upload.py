"""``spothop launch --server``: the job's code packed here and uploaded to the server.

The server never reads a path of this machine (it may run anywhere), so before the
launch request:

1. The ``workdir`` and each local ``file_mounts`` source (not a bucket URL) are packed
   on this machine by the embedded launch's packer
   (:func:`~spothop.controlplane.archives.store_workdir`,
   :func:`~spothop.controlplane.archives.store_mount`: the same ignore files, the same
   size limit and its error), into a temporary folder removed once the launch is sent.
2. Each archive is named by its sha256; one the server already holds for the token's
   project (``GET /v1/code/{sha256}``) is not sent again; one over the server's bound
   (that answer's ``max_bytes``) is refused here, naming both sizes; the others are
   sent (``PUT /v1/code/{sha256}``), with a progress bar on a terminal when large.
3. :func:`upload_code` returns the launch's ``code``: ``{"workdir": SHA256,
   "file_mounts": {DEST: {"sha256", "file"}}}`` (None when there is nothing to send).

What is said goes to stderr (``--json`` keeps stdout to itself), one line an archive.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spothop.cli.output import err_console, note
from spothop.errors import JobSpecError

if TYPE_CHECKING:
    from spothop.cli.remote import ServerClient
    from spothop.controlplane.archives import CodeArchive
    from spothop.jobs.spec import JobSpec

PROGRESS_MIN_BYTES = 8 * 1024 * 1024  # a smaller archive is sent before a bar would be read
MIB = 1024 * 1024


def upload_code(
    client: ServerClient, spec: JobSpec, *, quiet: bool = False
) -> dict[str, Any] | None:
    """Pack and upload ``spec``'s code (module docstring); the launch's ``code``, or None."""
    from spothop.controlplane.archives import store_mount, store_workdir
    from spothop.jobs.spec_mounts import is_url

    local = {dest: src for dest, src in spec.file_mounts.items() if not is_url(src)}
    if not spec.workdir and not local:
        return None
    code: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spothop-pack-") as folder:
        home = Path(folder)
        if spec.workdir:
            packed = store_workdir(spec.workdir, home)
            _send(client, "workdir", packed, quiet)
            code["workdir"] = packed.sha256
        mounts: dict[str, Any] = {}
        for dest, source in local.items():
            label = f"file_mounts {dest!r}"
            packed = store_mount(source, label, home)
            _send(client, label, packed, quiet)
            mounts[dest] = {"sha256": packed.sha256, "file": not Path(source).is_dir()}
        if mounts:
            code["file_mounts"] = mounts
    return code


def _send(client: ServerClient, label: str, packed: CodeArchive, quiet: bool) -> None:
    """Upload ``packed`` unless the server holds it (module docstring, step 2)."""
    size = f"{_mib(packed.archive_bytes)} ({packed.files} files, sha256 {packed.sha256[:12]})"
    held = client.code_held(packed.sha256)
    if held.get("held"):
        if not quiet:
            note(f"{label}: {size} already on the server, not sent", stderr=True)
        return
    limit = held.get("max_bytes")
    if isinstance(limit, int) and packed.archive_bytes > limit:
        raise JobSpecError(
            f"{label}: the archive is {_mib(packed.archive_bytes)}, over the {_mib(limit)} "
            f"the server at {client.base_url} takes; leave large files out in .spothopignore "
            "(put data in a bucket) or ask its operator to raise SPOTHOP_WORKDIR_MAX_MIB"
        )
    if not quiet:
        note(f"{label}: uploading {size}", stderr=True)
    with _progress(label, packed.archive_bytes, show=not quiet) as advance:
        client.upload_code(packed.sha256, str(packed.path), advance)


@contextlib.contextmanager
def _progress(label: str, total: int, *, show: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on a terminal for an archive of :data:`PROGRESS_MIN_BYTES` or more; a
    callable that does nothing otherwise."""
    if not show or total < PROGRESS_MIN_BYTES or not err_console.is_terminal:
        yield lambda _: None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda sent: bar.advance(task, sent)


def _mib(size_bytes: int) -> str:
    return f"{size_bytes / MIB:.1f} MiB" if size_bytes >= MIB / 10 else f"{size_bytes:,} bytes"
