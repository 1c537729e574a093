"""Before a job is launched: can its checkpoints and outputs be written, do its inputs exist?

A wrong bucket name found after an hour of GPU time costs that hour.
:func:`check_reachable` finds it before anything is paid for:

1. ``checkpoint.url`` and ``batch.output`` are probed: a small file is written
   there and deleted again (a local folder is created if missing; an object
   store's bucket never is). Any failure,
   however the storage library reports it, is a
   :class:`~spothop.errors.StorageUnreachable` naming the field, the URL and
   the cause.
2. Each of ``batch.inputs`` must match at least one file (a glob is expanded),
   else :class:`~spothop.errors.JobSpecError` naming the input.

Every problem is collected, so one run reports them all. The probe leaves
nothing behind when it succeeds.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from spothop.errors import JobSpecError, StorageUnreachable

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec

PROBE_NAME = ".spothop-probe-"  # + a random suffix: two launches never probe the same file
PROBE_BYTES = b"spothop write probe\n"


def check_reachable(spec: JobSpec) -> None:
    """Raise :class:`StorageUnreachable` if a checkpoint or output URL cannot be written, or
    :class:`JobSpecError` if a batch input matches no file; return None when all is well."""
    unreachable: list[tuple[str, str]] = []
    if spec.checkpoint is not None:
        _probe("checkpoint.url", spec.checkpoint.url, unreachable)
    if spec.batch is not None:
        _probe("batch.output", spec.batch.output, unreachable)
    if unreachable:
        raise StorageUnreachable(_joined(unreachable), unreachable)
    missing: list[tuple[str, str]] = []
    if spec.batch is not None:
        for i, pattern in enumerate(spec.batch.inputs):
            _expect_files(f"batch.inputs.{i}", pattern, missing)
    if missing:
        raise JobSpecError(_joined(missing), missing)


def _joined(problems: list[tuple[str, str]]) -> str:
    return "; ".join(f"{path}: {message}" for path, message in problems)


def _filesystem(url: str) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, str(path)


def _probe(field: str, url: str, problems: list[tuple[str, str]]) -> None:
    try:
        fs, root = _filesystem(url)
        if _is_local(fs):  # never on an object store: makedirs there would create a bucket
            fs.makedirs(root, exist_ok=True)
        probe = f"{root.rstrip('/')}/{PROBE_NAME}{uuid.uuid4().hex[:12]}"
        with fs.open(probe, "wb") as handle:
            handle.write(PROBE_BYTES)
        fs.rm(probe)
    except ImportError as exc:
        problems.append(
            (field, f"{url!r} needs a storage package that is not installed ({exc.name or exc})")
        )
    except Exception as exc:  # every storage library fails in its own words
        problems.append(
            (field, f"cannot write to {url!r}: {_cause(exc)}; fix the URL or its access")
        )


def _is_local(fs: Any) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return "file" in protocols or "local" in protocols


def _expect_files(field: str, pattern: str, problems: list[tuple[str, str]]) -> None:
    try:
        fs, path = _filesystem(pattern)
        found = (
            fs.glob(path) if any(c in path for c in "*?[") else [path] if fs.isfile(path) else []
        )
    except Exception as exc:
        problems.append((field, f"cannot list {pattern!r}: {_cause(exc)}"))
        return
    if not found:
        problems.append(
            (field, f"{pattern!r} matches no file; fix the path (relative to the job file)")
        )


def _cause(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"
