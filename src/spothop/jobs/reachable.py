"""Before a job is launched: can its checkpoints and outputs be written, do its inputs exist?

A wrong bucket name found after an hour of GPU time costs that hour.
:func:`check_reachable` finds it before anything is paid for:

0. Reachable from the instances (when given the providers the job may be
   placed on): an instance shares nothing with the controller but the network
   and the buckets. ``checkpoint.url`` and its ``replicas``, ``batch.output``
   and each of ``batch.inputs`` that is a plain path (no scheme, or
   ``file://``) must lie inside a folder that every such provider shares
   (:class:`~spothop.providers.extensions.SharedStorage`: the local cloud's
   world ``buckets:``); a provider without it (a real cloud) shares none. An
   object-store URL (``s3://``, ``gs://``, any other scheme) is reachable from
   everywhere. Else :class:`~spothop.errors.StorageUnreachable`, one line per
   field naming the path, the providers and the fix, before anything below
   runs (a probe would create the folder on this machine only).
1. ``checkpoint.url`` and ``batch.output`` are probed: a small file is written
   there and deleted again (a local folder is created if missing; an object
   store's bucket never is). Any failure,
   however the storage library reports it, is a
   :class:`~spothop.errors.StorageUnreachable` naming the field, the URL and
   the cause.
2. Each of ``batch.inputs`` must match at least one file (a glob is expanded),
   and each ``file_mounts`` source that is a URL must exist, else
   :class:`~spothop.errors.JobSpecError` naming the input or the mount (a local
   source is checked when the spec is read and again when it is packed).

Every problem is collected, so one run reports them all. The probe leaves
nothing behind when it succeeds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from spothop.errors import JobSpecError, StorageUnreachable
from spothop.providers.extensions import SharedStorage

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec

PROBE_NAME = ".spothop-probe-"  # + a random suffix: two launches never probe the same file
PROBE_BYTES = b"spothop write probe\n"


BUCKET_FIX = (
    "put it in a bucket: s3://…, gs://…, or a folder the local cloud's world declares under "
    "`buckets:`"
)


def check_reachable(spec: JobSpec, providers: Mapping[str, object] | None = None) -> None:
    """Raise :class:`StorageUnreachable` if a checkpoint, output or input path is a plain path
    that the instances of one of ``providers`` (name → provider; those the spec's
    ``providers.allow``/``deny`` exclude are skipped) cannot reach, or if a checkpoint or
    output URL cannot be written; :class:`JobSpecError` if a batch input matches no file;
    return None when all is well. ``providers`` None: the instances' reach is not checked."""
    if providers is not None:
        outside = unshared_paths(spec, placeable(spec, providers))
        if outside:
            raise StorageUnreachable(_joined(outside), outside)
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
    for dest, source in spec.file_mounts.items():
        if "://" in source and not source.startswith("file://"):
            _expect_source(f"file_mounts {dest!r}", source, missing)
    if missing:
        raise JobSpecError(_joined(missing), missing)


def placeable(spec: JobSpec, providers: Mapping[str, object]) -> dict[str, object]:
    """The providers of ``providers`` the spec lets the job be placed on (allow minus deny)."""
    allow, deny = set(spec.providers.allow), set(spec.providers.deny)
    return {
        name: provider
        for name, provider in providers.items()
        if name not in deny and (not allow or name in allow)
    }


def unshared_paths(spec: JobSpec, providers: Mapping[str, object]) -> list[tuple[str, str]]:
    """One ``(field, message)`` per plain path of the spec outside a shared folder of some of
    ``providers`` (module docstring, rule 0)."""
    shared = {name: _buckets(provider) for name, provider in providers.items()}
    problems: list[tuple[str, str]] = []
    for field, url in _paths(spec):
        path = local_path(url)
        if path is None:
            continue  # an object store's URL: every instance reaches it
        blind = sorted(n for n, buckets in shared.items() if not _inside(path, buckets))
        if blind:
            problems.append(
                (
                    field,
                    f"{url!r} is a folder of this machine that the instances of "
                    f"{', '.join(blind)} cannot reach; {BUCKET_FIX}",
                )
            )
    return problems


def local_path(url: str) -> Path | None:
    """The path of a plain path or ``file://`` URL; None for any other scheme."""
    if "://" not in url:
        return Path(url)
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    return Path(unquote(parts.path))


def _paths(spec: JobSpec) -> Iterator[tuple[str, str]]:
    if spec.checkpoint is not None:
        yield "checkpoint.url", spec.checkpoint.url
        for place, url in spec.checkpoint.replicas.items():
            yield f"checkpoint.replicas.{place}", url
    if spec.batch is not None:
        yield "batch.output", spec.batch.output
        for i, pattern in enumerate(spec.batch.inputs):
            yield f"batch.inputs.{i}", pattern


def _buckets(provider: object) -> tuple[Path, ...]:
    if not isinstance(provider, SharedStorage):
        return ()  # a real cloud: no folder of this machine is shared
    return tuple(_real(Path(b)) for b in provider.bucket_paths())


def _inside(path: Path, buckets: tuple[Path, ...]) -> bool:
    resolved = _real(path)
    return any(resolved == b or resolved.is_relative_to(b) for b in buckets)


def _real(path: Path) -> Path:
    """Absolute, symlinks resolved (a link out of a bucket is not in it), a glob kept as is."""
    return Path(os.path.realpath(path.expanduser().absolute()))


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


def _expect_source(field: str, url: str, problems: list[tuple[str, str]]) -> None:
    try:
        fs, path = _filesystem(url)
        found = fs.exists(path)
    except ImportError as exc:
        problems.append(
            (field, f"{url!r} needs a storage package that is not installed ({exc.name or exc})")
        )
        return
    except Exception as exc:
        problems.append((field, f"cannot read {url!r}: {_cause(exc)}"))
        return
    if not found:
        problems.append((field, f"the source {url!r} does not exist; fix the URL"))


def _cause(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"


def shared_by_all(path: str | Path, providers: Mapping[str, object]) -> bool:
    """Whether ``path`` (a plain path) lies in a folder every one of ``providers`` shares with
    its instances (a world bucket); False when ``providers`` is empty."""
    shared = [_buckets(provider) for provider in providers.values()]
    return bool(shared) and all(_inside(Path(path), buckets) for buckets in shared)
