"""The job spec's ``file_mounts``: files and folders put on every node before ``setup``.

``file_mounts: {DEST: SOURCE}``, as SkyPilot spells it. The contract of
:func:`check_file_mounts` (the field's validator):

1. ``DEST`` is where the node gets it: an absolute path (``/data``), a path in
   the instance user's home (``~/data``, ``~`` alone), or a relative path, which
   is the workdir's (the job's code's folder on the node). It may not climb out
   (no ``..`` part), be ``/`` itself, or hold a NUL; two mounts may not name
   the same place (``~/x`` and ``x/../x`` count as written, spelled once each).
2. ``SOURCE`` is a local path (a file or a folder; a relative one is the job
   file's, like ``workdir``; ``~`` expanded; ``file://`` read as a path) or an
   object-store URL (``s3://``, ``gs://``, any scheme fsspec reads). A local
   source must exist when the spec is read from a file; a URL is checked at
   launch (:func:`spothop.jobs.reachable.check_reachable`).
3. Every problem names its mount: ``file_mounts: '/data': …``.

What happens at launch (a local path packed and uploaded to the control
plane, or copied from a bucket at boot) is :mod:`spothop.controlplane.mounts`;
on the node, :mod:`spothop.agent.mounts`.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spothop.jobs.spec_values import resolve_local, valid_text

MAX_MOUNTS = 100  # a node's boot copies each one: more is a bucket's job, not a spec's


def is_url(source: str) -> bool:
    """A source the agent copies with fsspec (``s3://…``); a ``file://`` URL is a local path."""
    return "://" in source and not source.startswith("file://")


def check_dest(dest: str) -> str:
    """``dest`` as given, or ValueError saying why a node cannot take it (rule 1)."""
    valid_text(dest)
    text = dest.strip()
    if not text:
        raise ValueError("an empty destination; give a path on the node, e.g. /data or ~/data")
    if "://" in text:
        raise ValueError(
            "the destination is a path on the node, not a URL; write file_mounts as {DEST: SOURCE}"
        )
    if ".." in text.split("/"):
        raise ValueError(
            "the destination climbs out with '..'; give it as an absolute path, ~/…, or a path "
            "inside the workdir"
        )
    if posixpath.normpath(text) == "/":
        raise ValueError("the destination is the node's root '/'; name a folder under it")
    return text


def _source(dest: str, source: Any, base_dir: Path | None) -> str:
    if not isinstance(source, str) or not source.strip():
        raise ValueError(
            f"{dest!r}: the source is {source!r:.80}; give a local path or a bucket URL "
            "(s3://…, gs://…)"
        )
    valid_text(source)
    if is_url(source):
        return source.strip()
    path = resolve_local(source.strip(), base_dir).removeprefix("file://")
    if base_dir is not None and not os.path.exists(path):
        raise ValueError(
            f"{dest!r}: the source {path} does not exist (a local path is the job file's)"
        )
    return path


def check_file_mounts(mounts: Mapping[Any, Any], base_dir: Path | None) -> dict[str, str]:
    """``file_mounts`` checked, each local source made absolute against ``base_dir`` (see the
    module docstring); ValueError naming the mount."""
    if len(mounts) > MAX_MOUNTS:
        raise ValueError(
            f"{len(mounts)} mounts, over {MAX_MOUNTS}; put the files in one folder and mount it"
        )
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for raw_dest, source in mounts.items():
        if not isinstance(raw_dest, str):
            raise ValueError(
                f"the destination {raw_dest!r:.80} is not a path; give /path or ~/path"
            )
        try:
            dest = check_dest(raw_dest)
        except ValueError as err:
            raise ValueError(f"{raw_dest!r}: {err}") from None
        same = posixpath.normpath(dest)
        if same in seen:
            raise ValueError(f"{raw_dest!r}: the same destination as {seen[same]!r}; keep one")
        seen[same] = raw_dest
        out[dest] = _source(dest, source, base_dir)
    return out
