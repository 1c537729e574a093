"""Which dialect a job file is written in, and what each of its keys became.

:func:`dialect_of` names the dialect ``load_job`` reads a mapping as
(:class:`Dialect`: "dstack task", "SkyPilot task", "spothop job"), by the same
rules (:mod:`spothop.jobs.dstack`, :mod:`spothop.jobs.skypilot`).
:func:`explain` gives, for each key of the file (``resources`` keys one by one),
the spothop field it maps to and that field's value in the loaded spec: what
``spothop plan FILE --explain`` and ``launch --explain`` print.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from spothop.jobs.dstack import is_dstack
from spothop.jobs.skypilot import is_skypilot
from spothop.jobs.spec import JobSpec, read_job_file
from spothop.jobs.spec_mounts import is_url


class Dialect(StrEnum):
    DSTACK = "dstack task"
    SKYPILOT = "SkyPilot task"
    SPOTHOP = "spothop job"


def file_dialect(path: Path) -> tuple[Dialect, Any]:
    """The dialect of the job file at ``path`` and the mapping it holds (read as ``load_job``
    reads it; :class:`~spothop.errors.JobSpecError` when it cannot be read)."""
    data = read_job_file(path)
    return dialect_of(data), data


def dialect_of(data: Any) -> Dialect:
    """The dialect ``load_job`` reads ``data`` (a job file's mapping) as."""
    if isinstance(data, Mapping):
        if is_dstack(data):
            return Dialect.DSTACK
        if is_skypilot(data):
            return Dialect.SKYPILOT
    return Dialect.SPOTHOP


# Source key → the spothop field it becomes, where the names differ (dotted paths).
_SKYPILOT = {
    "resources.use_spot": "market",
    "resources.cloud": "providers.allow",
    "resources.region": "regions",
    "resources.zone": "zones",
    "resources.infra": "providers.allow, regions, zones",
    "resources.memory": "resources.memory_gib",
    "resources.disk_size": "resources.disk_size_gib",
    "resources.image_id": "image",
    "resources.job_recovery": "max_retries",
    "resources.spot_recovery": "max_retries",
}
_DSTACK = {
    "type": "kind",
    "commands": "run",
    "working_dir": "run (a cd before the commands)",
    "nodes": "num_nodes",
    "env": "envs",
    "spot_policy": "market",
    "backends": "providers.allow",
    "retry": "max_retries (spothop always recovers interruptions)",
    "resources.gpu": "resources (accelerators, gpus_per_node, min_gpu_memory_gib; any_of)",
    "resources.cpu": "resources.cpus",
    "resources.memory": "resources.memory_gib",
    "resources.disk": "resources.disk_size_gib",
    "resources.shm_size": "nothing: the containers share the host's IPC",
    "files": "file_mounts",
    "instance_types": "resources.instance_type (several: resources.any_of)",
}


def explain(data: Mapping[Any, Any], spec: JobSpec) -> list[tuple[str, str, str]]:
    """``(source key, spothop field, its value in spec)`` for each key of ``data``.

    ``resources`` is explained key by key, ``file_mounts`` (dstack's ``files``) mount by
    mount (each source and whether it is uploaded or copied from its bucket); the market is
    explained even when the
    file leaves it to the dialect's default.
    """
    dialect = dialect_of(data)
    renames = {Dialect.SKYPILOT: _SKYPILOT, Dialect.DSTACK: _DSTACK}.get(dialect, {})
    dumped = spec.model_dump(mode="json", by_alias=True)
    rows: list[tuple[str, str, str]] = []
    for key, value in data.items():
        if key in ("file_mounts", "files") and spec.file_mounts:
            rows += _mount_rows(str(key), spec)
            continue
        if key == "resources" and isinstance(value, Mapping):
            keys = [f"resources.{k}" for k in value]
        else:
            keys = [str(key)]
        for path in keys:
            target = renames.get(path, path)
            value = _value_of(dumped, target)
            alternatives = spec.resources.alternatives
            if path.endswith("accelerators") and value == "None" and alternatives:
                word = "ordered (in preference order)" if spec.resources.ordered else "any_of"
                target = (
                    f"resources.{word}"
                    if spec.resources.ordered
                    else f"resources.{word} (alternatives)"
                )
                value = ", ".join(_alternative(a) for a in alternatives)
            elif path in ("resources.any_of", "resources.ordered") and alternatives:
                if path == "resources.ordered":
                    target = "resources.ordered (in preference order)"
                value = _shown(", ".join(_alternative(a) for a in alternatives))
            elif path == "resources.image_id" and spec.image is None:
                target = "resources.image_id (the cloud's machine image)"
                value = _value_of(dumped, "resources.image_id")
            rows.append((path, target, value))
    if not any(target.startswith("market") for _, target, _ in rows):
        default = "on-demand (SkyPilot's default)" if dialect is Dialect.SKYPILOT else ""
        if dialect is Dialect.DSTACK:
            default = "on-demand (dstack's default)"
        rows.append(
            ("(market not given)", "market", default or f"{spec.market} (spothop's default)")
        )
    return rows


def _mount_rows(key: str, spec: JobSpec) -> list[tuple[str, str, str]]:
    """One row per mount: SkyPilot's ``file_mounts.DEST`` (or dstack's ``files.N``, in order),
    the spec's ``file_mounts.DEST``, and its source with what happens to it."""
    rows = []
    for i, (dest, source) in enumerate(spec.file_mounts.items()):
        how = (
            "copied from its bucket at boot" if is_url(source) else "packed and uploaded at launch"
        )
        where = f"files.{i}" if key == "files" else f"file_mounts.{dest}"
        rows.append((where, f"file_mounts.{dest}", f"{source} ({how})"))  # a path whole
    return rows


def _alternative(alt: Any) -> str:
    """One alternative in a few words: its GPU (or instance type) and its places."""
    parts = [str(p) for p in (alt.accelerators or alt.gpu, alt.instance_type) if p]
    for name in ("providers", "regions", "zones"):
        if getattr(alt, name):
            parts.append("/".join(getattr(alt, name)))
    return " ".join(parts) or "any"


def _shown(text: str) -> str:
    text = text.strip().replace("\n", " ⏎ ")
    return text if len(text) <= 80 else text[:77] + "…"


def _value_of(dumped: Mapping[str, Any], target: str) -> str:
    """The spec's value at the dotted ``target`` (its first field when it names several)."""
    path = target.split(",")[0].split(" ")[0]
    node: Any = dumped
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return "—"
        node = node[part]
    return _shown(str(node) if not isinstance(node, str) else node)
