"""A job's ``file_mounts`` planned at launch: what is uploaded, what is copied from a bucket.

:func:`plan_mounts` decides, for each ``DEST: SOURCE`` of the spec
(:mod:`spothop.jobs.spec_mounts`), before the job is stored:

1. A bucket URL (``s3://``, ``gs://``, any fsspec scheme): copied onto the node
   by its agent at boot (``{"dest", "copy": URL}``).
2. A plain path inside a folder every provider the job may run on shares with
   its instances (a world bucket: :func:`spothop.jobs.reachable.shared_by_all`):
   the node sees it at the same path, so the agent copies it there too
   (``{"dest", "copy": PATH}``); nothing is uploaded.
3. Any other local path (a file or folder of this machine): packed as a
   workdir is and stored content-addressed by the control plane
   (:func:`~spothop.controlplane.archives.store_mount`: ignore files, the size
   limit, one-line errors naming the mount); the agent fetches it with its
   token from the code route, which serves the token's job its mounts' archives
   too (``{"dest", "sha256", "file", "source"}``; ``source`` stays with the
   controller, never sent to a node).

The plan is stored with the job (``jobs.mounts_json``) and read by each launch
(:func:`spothop.jobs.launcher.agent_mounts` turns it into the agent's ``--mounts``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spothop.controlplane.archives import store_mount
from spothop.errors import JobSpecError
from spothop.jobs.reachable import placeable, shared_by_all
from spothop.jobs.spec_mounts import is_url

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec


def plan_mounts(
    spec: JobSpec,
    home: Path | None = None,
    providers: Mapping[str, object] | None = None,
    *,
    uploaded: Mapping[str, tuple[str, bool]] | None = None,
) -> list[dict[str, Any]]:
    """The plan of ``spec.file_mounts`` (module docstring), uploading what it must; ``providers``
    (name → provider; default the configured ones) decide which paths are buckets.
    :class:`~spothop.errors.JobSpecError` naming the mount for a source that cannot be packed.

    ``uploaded`` (a launch through the server: ``DEST → (sha256, is_file)``, packed and uploaded
    by the client): a local source is never read here; its uploaded archive is planned, and one
    the client did not upload is refused naming the mount."""
    plan: list[dict[str, Any]] = []
    reach: Mapping[str, object] | None = None
    for dest, source in spec.file_mounts.items():
        if is_url(source):
            plan.append({"dest": dest, "copy": source})
            continue
        if reach is None:
            if providers is None:
                from spothop.providers.registry import default_providers

                providers = default_providers()
            reach = placeable(spec, providers)
        if shared_by_all(source, reach):
            plan.append({"dest": dest, "copy": source})
            continue
        if uploaded is not None:
            sha256, is_file = _uploaded(uploaded, dest, source)
        else:
            sha256 = store_mount(source, f"file_mounts {dest!r}", home).sha256
            is_file = not Path(source).is_dir()
        plan.append({"dest": dest, "sha256": sha256, "file": is_file, "source": source})
    return plan


def _uploaded(uploaded: Mapping[str, tuple[str, bool]], dest: str, source: str) -> tuple[str, bool]:
    if dest not in uploaded:
        field = f"file_mounts.{dest}"
        message = (
            f"the source {source!r} is a path of the client's machine, which the server does not "
            f"read: upload its archive (PUT /v1/code/{{sha256}}) and name it in "
            f"code.file_mounts; `spothop launch --server` does both"
        )
        raise JobSpecError(f"{field}: {message}", [(field, message)])
    return uploaded[dest]


def plan_json(plan: list[dict[str, Any]]) -> str | None:
    """The plan as stored (``jobs.mounts_json``); None for no mounts."""
    return json.dumps(plan, sort_keys=True) if plan else None
